"""dwtune coordcheck SPEC: does a parametrisation keep activations width-stable after training?

The standard coordinate check (Yang et al. 2022): for each parametrisation, depth and width,
train a few AdamW steps at one rate and measure the RMS of every layer's output (embedding,
each block's residual stream, logits) on a fixed held-out batch. Prints a table, writes a PNG,
and with ``--json`` prints one object whose ``width_slope`` per parametrisation is the fitted
slope of ln(RMS of the last block's output) against ln(width) at the first depth
(``width_slopes`` gives every depth). About 0 means width-stable; SP at a fixed Adam rate
grows. It is a check of the first steps only, on tiny models: it cannot show that the optimal
rate transfers over a whole training (``train.lr`` as a search measures that).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dwtune.commands import argtypes
from dwtune.core.errors import InputError
from dwtune.core.spec.sections import PARAMETRIZATIONS
from dwtune.core.vocabulary import Parametrization

DEFAULT_WIDTHS = "64,128,256,512"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    argtypes.add_spec(parser, "experiment spec (its data, model and train settings)")
    parser.add_argument(
        "--parametrization", default="sp,mup", help="comma list of sp, mup, completep"
    )
    parser.add_argument("--widths", default=DEFAULT_WIDTHS, help="comma list of widths")
    parser.add_argument("--depths", default=None, help="comma list of depths (default: 2)")
    parser.add_argument("--steps", type=int, default=10, help="AdamW steps before measuring")
    parser.add_argument("--lr", type=float, default=None, help="rate (default: train.lr)")
    parser.add_argument("--out", default="coordcheck.png", help="PNG to write")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _int_list(flag: str, raw: str) -> list[int]:
    try:
        values = [int(v) for v in raw.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{flag}: got {raw!r}; expected integers such as 64,128,256") from None
    if not values or min(values) < 1:
        raise InputError(f"{flag}: got {raw!r}; expected positive integers such as 64,128")
    return sorted(set(values))


def _names(raw: str) -> list[str]:
    names = [v.strip() for v in raw.split(",") if v.strip()]
    for name in names:
        if name not in PARAMETRIZATIONS:
            raise InputError(
                f"--parametrization: got {name!r}; expected a comma list of "
                f"{', '.join(PARAMETRIZATIONS)}"
            )
    return names or [Parametrization.SP.value]


def _check_widths(spec, widths: list[int], depths: list[int]) -> None:
    step = spec.model.width_step
    for width in widths:
        spec.shape_at(depths[0], width)  # head_dim must divide it
        if width % step:
            raise InputError(
                f"--widths: {width} is not a multiple of {step} (heads or head_dim and "
                f"model.width_multiple); use widths such as {step * 8},{step * 16}"
            )


def summary(results: dict, widths: list[int]) -> dict:
    """Per parametrisation: width_slope (first depth), width_slopes, the per-layer values."""
    from dwtune.core.lr_search import ln_slope

    out = {}
    for name, by_depth in results.items():
        slopes = {}
        for depth, by_width in by_depth.items():
            last = f"block_{depth}"
            slopes[str(depth)] = ln_slope(widths, [by_width[w][last] for w in widths])
        first = str(min(by_depth))
        layers = {
            str(depth): {str(w): by_width[w] for w in widths}
            for depth, by_width in by_depth.items()
        }
        out[name] = {"width_slope": slopes[first], "width_slopes": slopes, "layers": layers}
    return out


def _table(results: dict, widths: list[int]) -> list[str]:
    lines = [f"{'param':>9} {'depth':>5} {'layer':>10} " + " ".join(f"{w:>9}" for w in widths)]
    for name, by_depth in results.items():
        for depth, by_width in by_depth.items():
            for layer in by_width[widths[0]]:
                values = " ".join(f"{by_width[w][layer]:9.4f}" for w in widths)
                lines.append(f"{name:>9} {depth:>5} {layer:>10} {values}")
    return lines


def run(args: argparse.Namespace) -> int:
    from dwtune.core.spec import load_spec

    spec = load_spec(args.spec, args.overrides)
    names = _names(args.parametrization)
    widths = _int_list("--widths", args.widths)
    depths = _int_list("--depths", args.depths or "2")
    if args.steps < 1:
        raise InputError(f"--steps: got {args.steps}; expected an integer >= 1")
    _check_widths(spec, widths, depths)
    lr = args.lr if args.lr is not None else spec.train.lr
    from dwtune.backends.pytorch.coordcheck import coordinate_check
    from dwtune.outputs.coordcheck_plot import plot_coordcheck

    results = coordinate_check(spec, names, widths, depths, args.steps, lr)
    result = summary(results, widths)
    png = plot_coordcheck(result, widths, Path(args.out))
    if args.json:
        print(
            json.dumps(
                {
                    "steps": args.steps,
                    "lr": lr,
                    "widths": widths,
                    "png": str(png),
                    "parametrizations": result,
                }
            )
        )
        return 0
    print("\n".join(_table(results, widths)))
    for name, item in result.items():
        print(
            f"{name}: width_slope {item['width_slope']:+.3f} (ln RMS of the last block vs ln width)"
        )
    print(f"plot: {png}")
    return 0
