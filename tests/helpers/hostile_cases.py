"""Generated hostile inputs: each case damages a copy of the built experiment (or writes a
hostile spec or input file) and names the command line to run and the outcome expected.

``expect``: "error" (exit 2, one line), "ok" (exit 0) or "any" (either, each clean).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from tests.helpers.hostile_experiment import base_raw

EXP = Path("experiments/hostile")
SPEC = Path("hostile.yaml")


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    command: str
    argv: Callable[[Path], list[str]]
    setup: Callable[[Path], None] = lambda root: None
    expect: str = "error"
    says: str = ""  # text the error line must contain


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


# --------------------------------------------------------------------------- hostile specs


def _set(dotted: str, value):
    def mutate(raw: dict) -> dict:
        *parents, key = dotted.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = value
        return raw

    return mutate


def _nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


SPEC_MUTATIONS: dict[str, object] = {
    "budgets-num-1e9": _set("space.budgets", {"min": 1e6, "max": 1e9, "num": 1e9}),
    "budgets-num-0": _set("space.budgets", {"min": 1e6, "max": 1e9, "num": 0}),
    "budgets-min-above-max": _set("space.budgets", {"min": 1e9, "max": 1e6, "num": 3}),
    "budgets-1e30": _set("space.budgets", [1e30]),
    "budgets-negative": _set("space.budgets", [-1e6]),
    "budgets-text": _set("space.budgets", ["lots"]),
    "budgets-nan": _set("space.budgets", [float("nan")]),
    "budgets-inf-text": _set("space.budgets", ["inf"]),
    "budgets-300-entries": _set("space.budgets", [1e6 + i for i in range(300)]),
    "seeds-1e9": _set("space.seeds", 1e9),
    "seeds-negative-count": _set("space.seeds", -1),
    "seeds-negative-list": _set("space.seeds", [-1]),
    "seeds-2pow40": _set("space.seeds", [2**40]),
    "seeds-text": _set("space.seeds", "many"),
    "depths-10000": _set("space.depths", [10000]),
    "depths-zero": _set("space.depths", [0]),
    "depths-100-entries": _set("space.depths", list(range(1, 101))),
    "depths-float": _set("space.depths", [1.5]),
    "depths-mapping": _set("space.depths", {"a": 1}),
    "mlp-ratio-1e308": _set("model.mlp_ratio", 1e308),
    "mlp-ratio-nan": _set("model.mlp_ratio", float("nan")),
    "mlp-ratio-inf": _set("model.mlp_ratio", float("inf")),
    "heads-zero": _set("model.heads", 0),
    "heads-1e6": _set("model.heads", 10**6),
    "width-multiple-1e9": _set("model.width_multiple", 10**9),
    "vocab-1e12": _set("data.vocab_size", 10**12),
    "seq-len-1e9": _set("data.seq_len", 10**9),
    "val-fraction-nan": _set("data.val_fraction", float("nan")),
    "steps-1e12": _set("train.steps", 10**12),
    "tokens-and-steps": _set("train.tokens", 1000),
    "lr-nan": _set("train.lr", float("nan")),
    "lr-inf-text": _set("train.lr", "inf"),
    "batch-size-zero": _set("train.batch_size", 0),
    "batch-size-1e9": _set("train.batch_size", 10**9),
    "eval-every-zero": _set("train.eval_every", 0),
    "patience-1e12": _set("train.patience", 10**12),
    "weight-decay-inf": _set("train.weight_decay", float("inf")),
    "huge-int-steps": _set("train.steps", 10**400),
    "max-rounds-1e6": _set("refine.max_rounds", 10**6),
    "max-seeds-1e6": _set("refine.max_seeds", 10**6),
    "tolerance-nan": _set("refine.tolerance", float("nan")),
    "noise-prior-dof-inf": _set("refine.noise_prior_dof", float("inf")),
    "noise-z-removed": _set("refine.noise_z", 2.0),
    "pairs-not-in-depths": _set("refine.pairs", [[1, 2]]),
    "pairs-reversed": _set("refine.pairs", [[12, 6]]),
    "fit-budgets-10": _set("fit.budgets", [10]),
    "fit-budgets-1e30": _set("fit.budgets", [1e30]),
    "fit-budgets-nan": _set("fit.budgets", [float("nan")]),
    "simulated-a-nan": _set("simulated.a", float("nan")),
    "simulated-b-inf": _set("simulated.b", float("inf")),
    "simulated-noise-negative": _set("simulated.noise", -1.0),
    "simulated-sleep-1e9": _set("simulated.seconds_per_step", 1e9),
    "cpu-nan": _set("resources.cpu", float("nan")),
    "retries-1e9": _set("resources.retries", 10**9),
    "gpu-third": _set("resources.gpu", 0.3),
    "name-with-slash": _set("name", "../escape"),
    "name-a-flag": _set("name", "--help"),
    "name-300-chars": _set("name", "n" * 300),
    "simulated-unknown-key": _set("simulated.zzz", 1),
    "unknown-key": _set("space.deptsh", [1]),
    "section-list": _set("model", [1, 2]),
    "nested-mapping-40": _set("description", _nested(40)),
}


def _alias_bomb(inline: bool = False) -> str:
    """A YAML "billion laughs": 9 levels of 9 aliases each name 9^9 strings in ~400 bytes."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "{" + ", ".join(lines) + "}" if inline else "\n".join(lines) + "\n"


ALIAS_BOMB = _alias_bomb()
SPEC_TEXTS: dict[str, str | bytes] = {
    "spec-is-a-list": "- 1\n- 2\n",
    "spec-is-a-number": "42\n",
    "spec-empty": "",
    "spec-binary": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe",
    "spec-brackets-5000": "[" * 5000 + "]" * 5000,
    "spec-yaml-error": "name: [unclosed\n",
    "spec-huge": "# " + "x" * (2 * 2**20) + "\n",
    "spec-alias-bomb": ALIAS_BOMB,
    "spec-alias-cycle": "name: &a [*a]\n",
}


def _spec_file(root: Path, name: str) -> Path:
    return root / "specs" / f"{name}.yaml"


def _spec_setup(name: str):
    def setup(root: Path) -> None:
        if name in SPEC_TEXTS:
            _write(_spec_file(root, name), SPEC_TEXTS[name])
            return
        raw = SPEC_MUTATIONS[name](base_raw())
        _write(_spec_file(root, name), yaml.safe_dump(raw, sort_keys=False))

    return setup


SPEC_COMMANDS = {
    "plan": lambda spec, root: ["plan", str(spec)],
    "run": lambda spec, root: ["run", str(spec), "--storage", str(root / "fresh")],
    "train": lambda spec, root: ["train", str(spec), "--depth", "2", "--width", "8"],
}


def spec_cases() -> list[Case]:
    cases = []
    for name in [*SPEC_MUTATIONS, *SPEC_TEXTS]:
        for command, argv in SPEC_COMMANDS.items():
            cases.append(
                Case(
                    f"{command}-{name}",
                    command,
                    lambda root, n=name, a=argv: a(_spec_file(root, n), root),
                    _spec_setup(name),
                )
            )
    special = {
        "dev-zero": lambda root: "/dev/zero",
        "a-directory": lambda root: str(root / EXP),
        "missing": lambda root: str(root / "nope.yaml"),
    }
    for name, path in special.items():
        cases.append(Case(f"plan-spec-{name}", "plan", lambda root, p=path: ["plan", p(root)]))
    return cases


# --------------------------------------------------------------------------- hostile flags

BENCH_FLAGS = [
    ["--heads", "0"],
    ["--heads", "-3"],
    ["--mlp-ratio", "nan"],
    ["--mlp-ratio", "inf"],
    ["--mlp-ratio", "1e308"],
    ["--width", "0"],
    ["--width", "1e9"],
    ["--depth", "0"],
    ["--depth", "100000"],
    ["--seq-len", "1"],
    ["--batch-size", "0"],
    ["--vocab-size", "1"],
    ["--steps", "0"],
    ["--warmup", "-1"],
    ["--seed", "-1"],
    ["--peak-flops", "nan"],
]
TRAIN_FLAGS = [
    ["--depth", "2", "--width", "8", "--seed", "-1"],
    ["--depth", "0", "--width", "8"],
    ["--depth", "2", "--width", "0"],
    ["--depth", "2", "--width", "8", "--steps", "0"],
    ["--depth", "2", "--budget", "nan"],
    ["--depth", "2", "--budget", "1e400"],
]
PROJECT_FLAGS = [
    ["--depth", "10000"],
    ["--depth", "nan"],
    ["--depth", "-1"],
    ["--budget", "nan"],
    ["--budget", "1e400"],
    ["--budget", "-5"],
    ["--budget", "175B", "--level", "2"],
    ["--budget", "175B", "--level", "nan"],
    ["--budget", "175B", "--reference", "nobody2030"],
]


def flag_cases() -> list[Case]:
    cases = [
        Case(f"bench{'_'.join(f)}", "bench", lambda root, f=f: ["bench", *f]) for f in BENCH_FLAGS
    ]
    cases += [
        Case(f"train{'_'.join(f)}", "train", lambda root, f=f: ["train", str(root / SPEC), *f])
        for f in TRAIN_FLAGS
    ]
    cases += [
        Case(f"project{'_'.join(f)}", "project", lambda root, f=f: ["project", *f])
        for f in PROJECT_FLAGS
    ]
    cases.append(
        Case(
            "run-address-not-host-port",
            "run",
            lambda root: [
                "run",
                str(root / SPEC),
                "--storage",
                str(root / "experiments"),
                "--address",
                "not a host:port",
            ],
            says="--address",
        )
    )
    for command in ("plan", "run"):
        cases.append(
            Case(
                f"{command}-override-alias-bomb",
                command,
                lambda root, c=command: [
                    *SPEC_COMMANDS[c](root / SPEC, root),
                    f"description={_alias_bomb(inline=True)}",
                ],
                says="aliases",
            )
        )
    return cases


# --------------------------------------------------------------------------- fit inputs

TRANSITIONS = {
    "pair": ["6-12", "12-18", "18-24"],
    "depth_shallow": [6, 12, 18],
    "depth_deep": [12, 18, 24],
    "status": ["bracketed"] * 3,
    "width_deep": [300.0, 560.0, 1100.0],
    "width_deep_err": [20.0, 30.0, 60.0],
    "seeds": [2, 2, 2],
}


def _transitions(**changes) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        columns = {**TRANSITIONS, **changes}
        pq.write_table(pa.table(columns), root / "input.parquet")

    return setup


def _text_file(name: str, text: str | bytes) -> Callable[[Path], None]:
    return lambda root: _write(root / name, text)


GOOD_FIT = {"status": "fitted", "a": 5.0, "b": 0.05, "cov": [[0.01, 0.0], [0.0, 0.0001]]}
FIT_INPUTS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "csv-tiny-errors": (
        "input.csv",
        _text_file("input.csv", "depth,width,width_err\n6,300,1e-300\n12,560,1e-300\n"),
    ),
    "csv-text-width": ("input.csv", _text_file("input.csv", "depth,width,width_err\n6,x,1\n")),
    "csv-inf": ("input.csv", _text_file("input.csv", "depth,width,width_err\n6,inf,1\n12,2,1\n")),
    "csv-empty": ("input.csv", _text_file("input.csv", "")),
    "csv-binary": ("input.csv", _text_file("input.csv", b"\xff\xfe\x00\x01")),
    "parquet-garbage": ("input.parquet", _text_file("input.parquet", b"PAR1 not really")),
    "parquet-seeds-text": ("input.parquet", _transitions(seeds=["a", "b", "c"])),
    "parquet-seeds-inf": ("input.parquet", _transitions(seeds=[float("inf")] * 3)),
    "parquet-status-lists": ("input.parquet", _transitions(status=[["x"], ["y"], ["z"]])),
    "parquet-width-nan": ("input.parquet", _transitions(width_deep=[float("nan")] * 3)),
}
FIT_JSONS: dict[str, object] = {
    "fit-json-nan-a": {**GOOD_FIT, "a": float("nan")},
    "fit-json-huge-b": {**GOOD_FIT, "b": 1e308},
    "fit-json-cov-nan": {**GOOD_FIT, "cov": [[float("nan"), 0], [0, 1]]},
    "fit-json-cov-negative": {**GOOD_FIT, "cov": [[-1, 0], [0, 1]]},
    "fit-json-cov-shape": {**GOOD_FIT, "cov": [1, 2, 3]},
    "fit-json-list": [1, 2],
    "fit-json-nested": _nested(10000),
    "fit-json-not-fitted": {"status": "too_few_points"},
    "fit-json-string-a": {**GOOD_FIT, "a": "five"},
}


def fit_cases() -> list[Case]:
    cases = []
    for name, (file, setup) in FIT_INPUTS.items():
        cases.append(Case(f"fit-{name}", "fit", lambda root, f=file: ["fit", str(root / f)], setup))
        cases.append(
            Case(
                f"project-{name}",
                "project",
                lambda root, f=file: ["project", "--fit", str(root / f), "--budget", "175B"],
                setup,
            )
        )

    def json_setup(value) -> Callable[[Path], None]:
        if isinstance(value, list) and value and isinstance(value[0], list):
            text = "[" * 10000 + "1" + "]" * 10000  # json.dumps itself would recurse too deep
        else:
            text = json.dumps(value)
        return _text_file("fit.json", text)

    for name, value in FIT_JSONS.items():
        cases.append(
            Case(
                f"project-{name}",
                "project",
                lambda root: ["project", "--fit", str(root / "fit.json"), "--budget", "175B"],
                json_setup(value),
            )
        )
    cases.append(
        Case(
            "project-fit-json-directory",
            "project",
            lambda root: ["project", "--fit", str(root / "fit.json"), "--budget", "175B"],
            lambda root: (root / "fit.json").mkdir(),
        )
    )
    return cases


# --------------------------------------------------------------------------- damaged directories


def _first_record(root: Path, stage: str = "grid") -> Path:
    for path in sorted((root / EXP / "trials").glob("*.json")):
        if json.loads(path.read_text())["stage"] == stage:
            return path
    raise AssertionError(f"no {stage} record")


def _record_edit(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        path = _first_record(root)
        raw = json.loads(path.read_text())
        path.write_text(json.dumps(change(raw)))

    return setup


def _record_text(text: str | bytes) -> Callable[[Path], None]:
    return lambda root: _write(_first_record(root), text)


def _record_dir(root: Path) -> None:
    path = _first_record(root)
    path.unlink()
    path.mkdir()


def _spec_yaml(text: str | bytes) -> Callable[[Path], None]:
    return lambda root: _write(root / EXP / "spec.yaml", text)


def _spec_yaml_dir(root: Path) -> None:
    (root / EXP / "spec.yaml").unlink()
    (root / EXP / "spec.yaml").mkdir()


def _journal() -> Callable[[Path], Path]:
    return lambda root: root / EXP / "refine" / "optuna.journal"


def _torn_journal(root: Path) -> None:
    path = _journal()(root)
    path.write_bytes(path.read_bytes() + b'{"op_code": 5, "worker_id": "ab')


def _journal_garbage(root: Path) -> None:
    path = _journal()(root)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([lines[0], b"\x00\xffgarbage\n", *lines[1:]]))


def _journal_wrong_ops(root: Path) -> None:
    path = _journal()(root)
    path.write_bytes(path.read_bytes() + b'{"op_code": 99, "worker_id": "x"}\n')  # no such op


def _journal_dir(root: Path) -> None:
    path = _journal()(root)
    path.unlink()
    path.mkdir()


def _journal_linked_outside(root: Path) -> None:
    path = _journal()(root)
    moved = shutil.move(path, root / path.name)
    path.symlink_to(moved)


def _stale_lock(root: Path) -> None:
    path = _journal()(root)
    Path(f"{path}.lock").symlink_to(path)


def _figures_file(root: Path) -> None:
    shutil.rmtree(root / EXP / "figures")
    (root / EXP / "figures").write_text("not a folder")


def _trials_a_file(root: Path) -> None:
    shutil.rmtree(root / EXP / "trials")
    (root / EXP / "trials").write_text("not a folder")


def _linked_outside(name: str) -> Callable[[Path], None]:
    """The experiment's ``name`` moved out of it, a symlink left in its place."""

    def setup(root: Path) -> None:
        inside, outside = root / EXP / name, root / f"outside-{name}"
        shutil.move(inside, outside)
        inside.symlink_to(outside)

    return setup


def _record_linked_outside(root: Path) -> None:
    record = _first_record(root)
    moved = shutil.move(record, root / record.name)
    record.symlink_to(moved)


def _curve(change) -> Callable[[Path], None]:
    return _record_edit(lambda raw: {**raw, "curve": change(raw["curve"])})


DIR_DAMAGES: dict[str, tuple[Callable[[Path], None], dict[str, str]]] = {
    # name: (setup, {command: expect}); commands missing from the mapping are not run
    "spec-yaml-binary": (
        _spec_yaml(b"\xff\xfe\x00garbage"),
        dict.fromkeys(("refine", "export", "report", "run"), "error"),
    ),
    "spec-yaml-directory": (
        _spec_yaml_dir,
        dict.fromkeys(("refine", "export", "report", "run"), "error"),
    ),
    "spec-yaml-list": (
        _spec_yaml("- 1\n- 2\n"),
        dict.fromkeys(("refine", "export", "report", "run"), "error"),
    ),
    "spec-yaml-nested": (
        _spec_yaml("[" * 5000),
        dict.fromkeys(("refine", "export", "report", "run"), "error"),
    ),
    "spec-yaml-alias-bomb": (
        _spec_yaml(ALIAS_BOMB),
        dict.fromkeys(("refine", "export", "report", "run"), "error"),
    ),
    "spec-yaml-empty": (
        _spec_yaml(""),
        dict.fromkeys(("refine", "export", "report", "run"), "error"),
    ),
    "record-json-list": (_record_text("[1, 2]"), {}),
    "record-json-null": (_record_text("null"), {}),
    "record-truncated": (_record_text('{"trial_id": "ab'), {}),
    "record-binary": (_record_text(b"\xff\xfe\x00"), {}),
    "record-nested": (_record_text("[" * 10000 + "]" * 10000), {}),
    "record-directory": (_record_dir, {}),
    "record-depth-text": (_record_edit(lambda r: {**r, "depth": "six"}), {}),
    "record-huge-int": (_record_edit(lambda r: {**r, "params_total": 10**400}), {}),
    "record-status-list": (_record_edit(lambda r: {**r, "status": ["finished"]}), {}),
    "record-missing-seed": (
        _record_edit(lambda r: {k: v for k, v in r.items() if k != "seed"}),
        {},
    ),
    "record-wrong-id": (_record_edit(lambda r: {**r, "trial_id": "0" * 16}), {}),
    "curve-text-steps": (_curve(lambda c: [{**p, "step": "one"} for p in c]), {}),
    "curve-a-mapping": (_curve(lambda c: {"step": 1}), {}),
    "curve-point-list": (_curve(lambda c: [[1, 2]]), {}),
    "journal-torn-tail": (_torn_journal, {"refine": "ok", "export": "ok", "report": "ok"}),
    "journal-garbage-line": (_journal_garbage, {"refine": "error"}),
    "journal-wrong-ops": (_journal_wrong_ops, {"refine": "error"}),
    "journal-directory": (_journal_dir, {"refine": "error"}),
    "journal-stale-lock": (_stale_lock, {"refine": "ok"}),
    "journal-linked-outside": (_journal_linked_outside, {"refine": "error"}),
    "trials-parquet-garbage": (
        _text_file(str(EXP / "trials.parquet"), b"garbage"),
        {"export": "ok", "report": "ok"},
    ),
    "curves-parquet-garbage": (
        _text_file(str(EXP / "curves.parquet"), b"PAR1garbagePAR1"),
        {"export": "ok", "report": "ok"},
    ),
    "figures-a-file": (_figures_file, {"report": "error"}),
    "trials-a-file": (
        _trials_a_file,
        {"refine": "error", "export": "error", "report": "error", "run": "error"},
    ),
    "trials-linked-outside": (
        _linked_outside("trials"),
        {"refine": "error", "export": "error", "report": "error", "run": "error"},
    ),
    "record-linked-outside": (
        _record_linked_outside,
        {"refine": "error", "export": "error", "run": "error"},
    ),
    "trials-parquet-linked-outside": (
        _linked_outside("trials.parquet"),
        {"export": "error", "report": "error", "run": "error"},
    ),
    "figures-linked-outside": (_linked_outside("figures"), {"report": "error", "run": "error"}),
    "tb-linked-outside": (_linked_outside("tb"), {"report": "error", "run": "error"}),
    "transitions-linked-outside": (
        _linked_outside("transitions.parquet"),
        {"fit": "error", "report": "error"},
    ),
    "transitions-garbage": (
        _text_file(str(EXP / "transitions.parquet"), b"garbage"),
        {"report": "any", "fit": "error"},
    ),
}
RECORD_COMMANDS = {"refine": "error", "export": "error", "report": "any", "run": "error"}

DIR_COMMANDS = {
    "refine": lambda root: ["refine", str(root / EXP)],
    "export": lambda root: ["export", str(root / EXP)],
    "report": lambda root: ["report", str(root / EXP)],
    "fit": lambda root: ["fit", str(root / EXP)],
    "run": lambda root: ["run", str(root / SPEC), "--storage", str(root / "experiments")],
}


def _records_deleted(root: Path) -> None:
    for path in (root / EXP / "trials").glob("*.json"):
        path.unlink()


def dir_cases() -> list[Case]:
    cases = []
    for name, (setup, commands) in DIR_DAMAGES.items():
        for command, expect in (commands or RECORD_COMMANDS).items():
            cases.append(Case(f"{command}-{name}", command, DIR_COMMANDS[command], setup, expect))
    cases.append(  # the fix is to train the grid again, not to change the spec
        Case(
            "refine-records-deleted",
            "refine",
            lambda root: ["refine", str(root / EXP), "--runner", "local"],
            _records_deleted,
            says="rerun `dwtune run SPEC`",
        )
    )
    return cases


def all_cases() -> list[Case]:
    return [*spec_cases(), *flag_cases(), *fit_cases(), *dir_cases()]
