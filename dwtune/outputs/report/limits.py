"""report.md's "What these results cannot show": the confounds and limits of *this* study.

Each caveat is read from what the trials recorded (every trial row carries its rate's source,
parametrisation, comparison axis and training length) and from the resolved spec, so a report
says which of a reviewer's first objections its own design leaves open, not a generic list.
"""

from __future__ import annotations

import math

import pandas as pd

from dwtune.core.fit import MIN_POINTS
from dwtune.core.intervals import SCALE_PRIOR_DOF
from dwtune.core.refine.design import unseen
from dwtune.core.spec import DataConfig
from dwtune.core.vocabulary import (
    LR_SOURCE_INTERPOLATED,
    LR_SOURCE_SEARCH,
    LR_SOURCE_SPEC,
    Parametrization,
    Stage,
    TransitionStatus,
)
from dwtune.storage.experiment import Experiment

TRANSFER_PARAMETRISATIONS = {
    Parametrization.MUP,
    Parametrization.COMPLETEP,
}  # one rate is meant to transfer across widths


def _values(trials: pd.DataFrame, column: str) -> set:
    """The distinct recorded values of a trial column (empty when the column is absent)."""
    if column not in trials.columns:
        return set()
    used = trials[trials["stage"] != Stage.LR_SEARCH] if "stage" in trials.columns else trials
    return {v for v in used[column].dropna().unique()}


def _section(spec: dict | None, name: str) -> dict:
    section = (spec or {}).get(name)
    return section if isinstance(section, dict) else {}


def _simulated(experiment: Experiment) -> list[str]:
    if not experiment.simulated:
        return []
    return [
        "Anything about a real model: every loss here comes from the simulated trainer's planted "
        "surface; the study shows what the pipeline recovers from such data, nothing more."
    ]


def _learning_rate(trials: pd.DataFrame) -> list[str]:
    sources = _values(trials, "lr_source")
    if sources == {LR_SOURCE_SPEC}:
        rates = sorted(float(r) for r in _values(trials, "lr"))
        shared = f"{rates[0]:g}" if len(rates) == 1 else "one rate from the spec"
        transfer = _values(trials, "parametrization") & TRANSFER_PARAMETRISATIONS
        if transfer:
            return [
                f"That one learning rate suited every shape: every trial trained at {shared} "
                f"under `{sorted(transfer)[0]}`, whose rules are meant to let one rate serve "
                "every width; `dwtune coordcheck` and a per-shape search (`train.lr: {search: "
                "log, ...}`) test whether it does at these shapes."
            ]
        return [
            f"Whether a shape won on its own merit or on its learning rate: every trial trained "
            f"at {shared}, while the best Adam rate falls roughly as 1/width under standard "
            "parametrisation, so a pair's narrower (deeper) and wider net are mis-tuned by "
            "different amounts and that alone can move a crossing. Separate the two with "
            "`train.lr: {search: log, ...}` (a rate per shape) or `model.parametrization: mup`."
        ]
    if sources & {LR_SOURCE_SEARCH, LR_SOURCE_INTERPOLATED}:
        return [
            "A learning rate tuned per seed: each cell's rate was searched on its first seed "
            "only (refine points interpolate the grid's rates in ln width), so seed-to-seed "
            "differences in the best rate are not in the intervals."
        ]
    return []


def _parametrisation(trials: pd.DataFrame, spec: dict | None) -> list[str]:
    used = _values(trials, "parametrization") or {_section(spec, "model").get("parametrization")}
    used.discard(None)
    if len(used) != 1:
        return []
    return [
        f"The transitions under another parametrisation: every trial used "
        f"`{used.pop()}`; SP, μP and CompleteP scale initialisation and per-layer rates "
        "differently with width and depth and can move the best shape."
    ]


def _training_length(experiment: Experiment, trials: pd.DataFrame, spec: dict | None) -> list[str]:
    train = _section(spec, "train")
    if _values(trials, "tokens_per_param") or train.get("tokens_per_param"):
        length = "a fixed number of tokens per parameter"
    elif train.get("steps"):
        length = f"{train['steps']:,} steps whatever its size"
    else:
        return []
    if experiment.length_check is not None and not experiment.length_check.empty:
        return [
            f"N* at training lengths other than those checked: trained for {length}; the "
            "training-length section above re-estimates N* at the checked lengths only."
        ]
    return [
        f"N* at another training length: every trial trained for {length}; a transition can "
        "move with training length (the paper trained 1M steps). `refine.length_check: [0.5, "
        "2.0]` re-estimates each N* at other lengths."
    ]


def _compute(trials: pd.DataFrame, spec: dict | None) -> list[str]:
    compare = _values(trials, "compare") or {_section(spec, "space").get("compare")}
    if compare == {"flops"}:
        return [
            "The comparison at equal parameters: shapes were compared at equal training FLOPs; "
            "at equal parameters (the paper's axis) N* differs."
        ]
    if compare == {"params"}:
        return [
            "The comparison at equal compute: shapes were compared at equal non-embedding "
            "parameters (the paper's axis); a deeper, narrower net of the same size spends "
            "other FLOPs and wall-clock per token (`space.compare: flops` compares at equal "
            "FLOPs)."
        ]
    return []


def _data(experiment: Experiment, spec: dict | None) -> list[str]:
    data = _section(spec, "data")
    if not data or experiment.simulated:  # the simulated trainer reads no corpus
        return []
    corpus, tokenizer = data.get("corpus", "the corpus"), data.get("tokenizer", "its tokenizer")
    vocab, seq_len = data.get("vocab_size", "?"), data.get("seq_len", "?")
    return [
        f"Another corpus, tokenizer or context: these numbers hold for `{corpus}` with "
        f"`{tokenizer}` (vocabulary {vocab}, {seq_len}-token sequences); a transition moves "
        "with any of them.",
        *_repeated_data(data, corpus),
    ]


def _repeated_data(data: dict, corpus: str) -> list[str]:
    """An overfitting design: the epoch guard raised above its default on purpose."""
    limit = data.get("max_epochs")
    default = DataConfig().max_epochs
    if not isinstance(limit, int | float) or limit <= default:
        return []
    return [
        f"Capacity on fresh data: `data.max_epochs: {limit:g}` (the guard's default is "
        f"{default:g}) lets each trial read `{corpus}` up to {limit:g} times, and a record keeps "
        "the best validation loss over its run, so each shape's loss says how far it gets "
        "before it starts to memorise the training split (an overfitting design), not what it "
        "would reach on data it never repeats."
    ]


def _transitions(experiment: Experiment, spec: dict | None) -> list[str]:
    lines = []
    if _section(spec, "refine").get("scan_spacing") == 0:
        lines.append(
            "A second sign change between the sizes trained: `refine.scan_spacing: 0` turned "
            "the scan off, so a dip of Δ between sizes stays unseen."
        )
    limit = unseen(str(_section(spec, "refine").get("design", "")))
    if limit is not None:
        lines.append(limit)
    frame = experiment.transitions
    if frame is None or frame.empty:
        return lines
    # The fit's own rule (dwtune.core.fit): censored pairs enter its likelihood but do not
    # count towards the bracketed transitions it needs.
    bracketed = int((frame["status"].astype(str) == TransitionStatus.BRACKETED).sum())
    if bracketed < MIN_POINTS:
        lines.append(
            f"A law or a projection from this study alone: {bracketed} pair(s) bracketed a "
            f"transition, and a fit of ln dx* = a + b·L needs at least {MIN_POINTS}."
        )
    else:
        lines.append(
            f"The law's intervals with {bracketed} bracketed pairs: they take the pairs' "
            f"σ(ln N*) as a prior worth {SCALE_PRIOR_DOF:g} pseudo-observations and learn "
            "their scale from how the pairs scatter about the law, an estimate as noisy as "
            "the pairs are few; a law that bends beyond the measured depths is not in them."
        )
    if bracketed:
        lines.append(
            "Intervals on a loss surface unlike the simulated ones: the N* intervals' coverage "
            "was measured on ten simulated surfaces with the noise guess right and 2-5× wrong "
            "(`benchmarks/coverage.py`); at one fixed layout of points a pair's 68% interval "
            "can run narrow, so read σ(ln N*) and the 95% interval."
        )
    return [*lines, *_noise(frame), *_bounds(frame)]


def _noise(frame: pd.DataFrame) -> list[str]:
    """How much the seeds measured the noise, and the trainings set aside as unstable."""
    lines = []
    if "noise_dof" in frame.columns:
        few = frame[frame["noise_dof"].astype(float) < 4]
        if not few.empty:
            pairs = ", ".join(str(p) for p in few["pair"])
            lines.append(
                f"Signs as firm as more seeds would make them: pair(s) {pairs} measured their "
                "seed noise on fewer than 4 degrees of freedom, so the rule's Student-t "
                "boundaries are wide and sizes near N* stay within noise (more seeds narrow "
                "them)."
            )
    unstable = [c for c in ("unstable_deep", "unstable_shallow") if c in frame.columns]
    count = int(frame[unstable].sum().sum()) if unstable else 0
    if count:
        lines.append(
            f"What the {count} training(s) flagged unstable would have reached: each ended "
            "far above its twins (same shape, other seeds); it counts as a failure of its net "
            "at that seed and sets no one's noise (pair_deltas.parquet names them)."
        )
    return lines


def _bounds(frame: pd.DataFrame) -> list[str]:
    """A one-sided answer is only as good as Δ's single sign change."""
    one_sided = (
        frame["status"]
        .astype(str)
        .isin(
            [
                TransitionStatus.CENSORED_HIGH,
                TransitionStatus.CENSORED_LOW,
                TransitionStatus.UNDECIDED,
            ]
        )
    )
    if not one_sided.any():
        return []
    return [
        "Where N* lies beyond a bound: a bound such as N* > 3e5 says the deeper net lost at "
        "every size up to it, decided sign by sign at refine.alpha, and assumes Δ changes sign "
        "once; it says nothing of how far above the bound N* is."
    ]


def _extrapolation(trials: pd.DataFrame) -> list[str]:
    if "params_non_embedding" not in trials.columns or trials.empty:
        return []
    largest = float(trials["params_non_embedding"].astype(float).max())
    if not math.isfinite(largest):
        return []
    return [
        f"That the law holds beyond the sizes trained (largest {largest:.3g} non-embedding "
        "parameters): every projection past it is an extrapolation of the fitted form."
    ]


def limits_lines(experiment: Experiment) -> list[str]:
    """The bullets of the section, most fundamental first."""
    trials, spec = experiment.trials, experiment.spec
    return [
        *_simulated(experiment),
        *_learning_rate(trials),
        *_parametrisation(trials, spec),
        *_training_length(experiment, trials, spec),
        *_compute(trials, spec),
        *_data(experiment, spec),
        *_transitions(experiment, spec),
        *_extrapolation(trials),
    ]


def limits_section(experiment: Experiment) -> list[str]:
    lines = limits_lines(experiment)
    if not lines:
        return []
    return ["## What these results cannot show", "", *[f"- {line}" for line in lines], ""]
