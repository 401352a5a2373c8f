"""TensorBoard event files of every trial, drawn from its curve and its record, and the fit's.

``tb/<stage>/[<pair>/]<trial name>/``: TensorBoard scalars of every trial (each key of
:data:`dwtune.core.vocabulary.CURVE_SCALARS` against step, train and validation loss also
against tokens) and its HParams entry (depth, width, budget, seed, pair, lr, parametrization,
... -> final and best validation loss). Runs are grouped by stage, refine runs by pair too
(``tb/grid/L6_w120_s0_5a746e``, ``tb/refine/6-12/L12_w96_s3_0f1c2d``), so TensorBoard's run
filter selects a stage (``grid/``) or a pair (``refine/6-12``). ``tb/refine/<pair>/decisions``
holds the pair's refine decisions as scalars against the round (Δ, its se, the size, the sign)
and its N* and interval; ``tb/fit`` the fit.
A live trial's points are added as it reports; a finished trial's board is rewritten from its
record, so it can be rebuilt at any time and is never the only copy of a result.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

from dwtune.core import vocabulary
from dwtune.core.records import TrialRecord
from dwtune.core.vocabulary import TB_DIR, TB_FIT_DIR
from dwtune.storage.fit_json import is_fitted

# TensorBoard: losses also plotted against tokens seen, under these tags.
BY_TOKENS = {
    key: f"{key}_by_{vocabulary.TOKENS}" for key in (vocabulary.TRAIN_LOSS, vocabulary.VAL_LOSS)
}
SIMULATED_SUFFIX = f"-{vocabulary.SIMULATED_LABEL}"  # on a simulated trial's run folder
HPARAMS = (
    "depth",
    "width",
    "heads",
    "budget",
    "seed",
    "stage",
    "status",
    "params_non_embedding",
    vocabulary.SIMULATED_COLUMN,
    "pair",
    "round",
    "point_kind",
    "lr",
    "lr_source",
    "parametrization",
    "head_dim",
    "compare",
)
DECISIONS_RUN = "decisions"  # under tb/refine/<pair>/: the pair's refine decisions
HPARAM_METRICS = ("final_val_loss", "best_val_loss")
FIT_BOARD = Path(TB_DIR) / TB_FIT_DIR  # under the experiment: the fit's text and scalars
FIT_SCALARS = ("a", "b", "se_a", "se_b", "r2", "chi2_red", "dof", "n_points")


def tensorboard_problem() -> str | None:
    """None when event files can be written, else why not (one line)."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError as exc:
        return (
            f"tensorboardX is not importable ({exc}); no TensorBoard event files will be "
            f"written; install it with `pip install tensorboardX`"
        )
    return None


def run_group(stage: str, pair: str = "") -> Path:
    """The folder of a trial's run under ``tb/``: its stage, and its pair when it has one."""
    group = Path(stage or "other")
    return group / pair if pair else group


def run_dir(store_root: Path, name: str, simulated: bool, stage: str = "", pair: str = "") -> Path:
    """``<experiment>/tb/<stage>/[<pair>/]<trial name>``; simulated runs carry a suffix that
    says so."""
    leaf = name + (SIMULATED_SUFFIX if simulated else "")
    return Path(store_root) / TB_DIR / run_group(stage, pair) / leaf


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def add_point(writer, point: dict) -> None:
    """Write one curve point's scalars (against step, and losses against tokens)."""
    step = int(point.get(vocabulary.STEP, 0))
    for key in vocabulary.CURVE_SCALARS:
        if _finite(point.get(key)):
            writer.add_scalar(key, float(point[key]), global_step=step)
    tokens = point.get(vocabulary.TOKENS)
    for key, tag in BY_TOKENS.items():
        if _finite(point.get(key)) and tokens is not None:
            writer.add_scalar(tag, float(point[key]), global_step=int(tokens))


def open_writer(path: Path, simulated: bool):
    """An :class:`~dwtune.outputs.event_files.EventFile` in ``path`` (written in this thread,
    so a full disk is an OSError here); simulated runs get a text note saying so."""
    from dwtune.outputs.event_files import EventFile

    writer = EventFile(path)
    if simulated:
        writer.add_text("backend", vocabulary.SIMULATED_BANNER, global_step=0)
    return writer


def _add_hparams(writer, record: TrialRecord) -> None:
    from tensorboardX.summary import hparams

    values = dataclasses.asdict(record)
    hparam_dict = {name: values[name] for name in HPARAMS}
    metric_dict = {f"hparam/{name}": float(values[name]) for name in HPARAM_METRICS}
    for summary in hparams(hparam_dict, metric_dict):
        writer.add_summary(summary)
    for tag, value in metric_dict.items():
        if math.isfinite(value):  # a failed trial has none (and tensorboardX warns on NaN)
            writer.add_scalar(tag, value, global_step=record.steps)


def write_trial_board(store_root: Path, name: str, record: TrialRecord) -> Path:
    """(Re)write a finished trial's event files from its record: its whole curve and HParams.

    The directory is replaced, so points a live writer or an interrupted attempt left there
    never show twice.
    """
    path = run_dir(store_root, name, record.simulated, record.stage, record.pair)
    shutil.rmtree(path, ignore_errors=True)
    with open_writer(path, record.simulated) as writer:
        for point in record.curve:
            add_point(writer, point)
        _add_hparams(writer, record)
    return path


def refine_board(store_root: Path, pair: str, simulated: bool) -> Path:
    leaf = DECISIONS_RUN + (SIMULATED_SUFFIX if simulated else "")
    return Path(store_root) / TB_DIR / run_group(vocabulary.Stage.REFINE, pair) / leaf


def write_refine_board(
    store_root: Path, pair: str, rounds: list[dict], summary: dict, simulated: bool
) -> Path | None:
    """The pair's refine decisions under ``tb/refine/<pair>/decisions`` (replacing earlier
    events): each of ``rounds`` (a dict of numbers, with ``round``) as ``refine/<key>``
    scalars at its round, ``summary``'s numbers (N*, its interval) at the last round, and the
    status as text. None without tensorboardX."""
    if tensorboard_problem() is not None:
        return None
    folder = refine_board(store_root, pair, simulated)
    shutil.rmtree(folder, ignore_errors=True)
    last = max((int(r["round"]) for r in rounds), default=0)
    with open_writer(folder, simulated) as writer:
        for row in rounds:
            for key, value in row.items():
                if key != "round" and _finite(value):
                    writer.add_scalar(f"refine/{key}", float(value), int(row["round"]))
        for key, value in summary.items():
            if _finite(value):
                writer.add_scalar(f"refine/{key}", float(value), last)
            elif isinstance(value, str):
                writer.add_text(f"refine/{key}", value, last)
    return folder


def write_fit_board(root: Path, record: dict, fit_text: str) -> Path | None:
    """The fit as text and scalars under ``<root>/tb/fit`` (replacing earlier events); None
    without tensorboardX."""
    try:
        from dwtune.outputs.event_files import EventFile
    except ImportError:  # no tensorboardX
        return None
    folder = root / FIT_BOARD
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("events.out.tfevents.*"):
        old.unlink()  # one summary per report, not a history of reruns
    with EventFile(folder) as writer:
        writer.add_text("fit/summary", fit_text, 0)
        if is_fitted(record):
            for key in FIT_SCALARS:
                writer.add_scalar(f"fit/{key}", float(record[key]), 0)
    return folder
