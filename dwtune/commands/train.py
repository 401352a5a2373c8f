"""dwtune train SPEC --depth L (--width W | --budget N): train one model in-process.

Uses the spec's data, model and training settings (``--steps`` and ``--device`` override
them), shows a progress bar, and prints the final metrics. No Ray.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from dwtune.commands import argtypes
from dwtune.core.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    argtypes.add_spec(parser, "experiment spec, e.g. search_spaces/quickstart.yaml")
    parser.add_argument("--depth", type=argtypes.DEPTH, required=True, help="number of blocks")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument(
        "--width", type=argtypes.WIDTH, help="model width (a multiple of model.heads)"
    )
    size.add_argument("--budget", help="solve the width for this size, e.g. 1e6 or 50M")
    parser.add_argument("--seed", type=argtypes.SEED, default=0, help="the seed (default 0)")
    parser.add_argument("--steps", type=argtypes.STEPS, default=None, help="override train.steps")
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default=None, help="override train.device"
    )
    parser.add_argument(
        "--compile", choices=("auto", "true", "false"), default=None, help="override train.compile"
    )
    parser.add_argument(
        "--checkpoint-dir", default=None, help="save the full state here at every evaluation"
    )
    parser.add_argument("--resume-from", default=None, help="continue from a checkpoint dir")
    parser.add_argument("--json", action="store_true", help="print the final metrics as JSON")


def _overridden(spec, args: argparse.Namespace):
    """The spec with command-line overrides (validated by the config's own checks)."""
    changes = {}
    if args.steps is not None:
        changes.update(steps=args.steps, tokens=None)
    if args.device is not None:
        changes["device"] = args.device
    if args.compile is not None:
        changes["compile"] = args.compile
    return dataclasses.replace(spec, train=dataclasses.replace(spec.train, **changes))


def _shape(spec, args: argparse.Namespace):
    from dwtune.backends.pytorch.model import check_shape
    from dwtune.core.units import parse_size

    if args.depth < 1:
        raise InputError(f"--depth: got {args.depth}; expected an integer >= 1")
    if args.budget is not None:
        return spec.cell(args.depth, parse_size(args.budget, "--budget")).shape
    shape = spec.shape_at(args.depth, args.width)
    check_shape(shape)
    return shape


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="step", dynamic_ncols=True, mininterval=0.5, file=sys.stderr)


def _format(final: dict, shape, extra: dict) -> str:
    from dwtune.core.units import format_size

    lines = [
        f"depth {shape.depth} x width {shape.width}, {shape.heads} heads, "
        f"{format_size(extra['params'])} params; {extra['device']}"
    ]
    for key, value in final.items():
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        lines.append(f"  {key:<20} {shown}")
    lines.append(f"  {'MFU peak':<20} {extra['peak_source']}")
    return "\n".join(lines)


def _train_with_progress(trainer, checkpoint_dir: str | None) -> dict:
    """Run the trainer under a progress bar that shows the latest validation loss."""
    from dwtune.core import vocabulary

    bar = _progress_bar(trainer.total_steps)
    bar.update(trainer.progress.step)  # a resumed run starts part-way

    def report(m: dict, _checkpoint: str | None) -> None:
        postfix = {
            "val": f"{m[vocabulary.VAL_LOSS]:.4f}",
            "tok/s": f"{m[vocabulary.TOKENS_PER_S]:,.0f}",
        }
        bar.set_postfix(postfix, refresh=False)

    with bar:
        return trainer.run(report, checkpoint_dir, on_step=lambda _step: bar.update(1))


def _check_checkpoint_dir(path: str | None) -> None:
    """--checkpoint-dir must be a folder this process can write, before training starts."""
    if path is None:
        return
    folder = Path(path).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise InputError(
            f"--checkpoint-dir: cannot write to {folder} ({exc.strerror}); pass a writable folder"
        ) from None


def run(args: argparse.Namespace) -> int:
    from dwtune.backends.data import resolve_data_config
    from dwtune.core.budget import count_params
    from dwtune.core.spec import load_spec

    spec = _overridden(load_spec(args.spec, args.overrides), args)
    spec = dataclasses.replace(spec, data=resolve_data_config(spec.data))
    shape = _shape(spec, args)
    if spec.trainer != "torch":
        raise InputError(
            f"trainer: got {spec.trainer!r}; dwtune train runs the torch trainer "
            f"(set trainer: torch, or use dwtune run for simulated studies)"
        )
    from dwtune.backends.pytorch.perf import device_name
    from dwtune.backends.pytorch.train import TrainingLoop

    _check_checkpoint_dir(args.checkpoint_dir)
    try:
        trainer = TrainingLoop(spec, shape, args.seed)
        if args.resume_from:
            trainer.restore(args.resume_from)
        final = _train_with_progress(trainer, args.checkpoint_dir)
    except (MemoryError, RuntimeError) as exc:
        from dwtune.backends.pytorch.bench import is_out_of_memory

        if not is_out_of_memory(exc):
            raise
        raise InputError(
            f"out of memory training depth {shape.depth} x width {shape.width}; lower "
            f"train.batch_size or the width"
        ) from None
    compiled = "on" if trainer.runtime.compile else "off"
    extra = {
        "params": count_params(shape).total,
        "peak_source": trainer.peak.source,
        "device": f"{device_name(trainer.runtime.device)}, compile {compiled}",
    }
    if args.json:
        print(json.dumps({"metrics": final, "shape": dataclasses.asdict(shape), **extra}))
    else:
        print(_format(final, shape, extra))
    return 0
