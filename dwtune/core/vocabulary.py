"""The one vocabulary: metric names, statuses, stages, step kinds, settings and file names.

Every producer (torch trainer, simulated backend) reports these keys; every consumer (Ray Tune,
bisection, Parquet, TensorBoard, report) reads them. Never spell one of these names anywhere
else. The enums are StrEnums: a member equals its string, so records, journals and Parquet files
written before the enums existed read back unchanged.
"""

from enum import StrEnum

TRAIN_LOSS = "train/loss"
VAL_LOSS = "val/loss"
VAL_BEST_LOSS = "val/best_loss"
STEP = "step"
TOKENS = "tokens"
LR = "lr"
GRAD_NORM = "grad_norm"
TOKENS_PER_S = "perf/tokens_per_s"
STEP_TIME_S = "perf/step_time_s"
MFU = "perf/mfu"
ELAPSED_S = "time/elapsed_s"
# Processes a training spans (1; its workers when sharded) and the GPUs it holds, all of them
# together (0 on CPU; a packed trial's fraction of one): the torch trainer reports both.
WORKERS = "perf/workers"
GPUS = "perf/gpus"
# Final status of a training (a TrialStatus), set in the last report.
STATUS = "status"


class TrialStatus(StrEnum):
    """How a training ended."""

    FINISHED = "finished"
    EARLY_STOPPED = "early_stopped"
    DIVERGED = "diverged"
    FAILED = "failed"


class Stage(StrEnum):
    """The pipeline stage that asked for a trial (recorded in its request and trials.parquet)."""

    GRID = "grid"
    REFINE = "refine"
    LR_SEARCH = "lr_search"  # a reduced-fidelity trial of a per-shape learning-rate search
    LENGTH_CHECK = "length_check"  # a pair point retrained at another length (refine.length_check)


class TransitionStatus(StrEnum):
    """Where a depth pair's transition N* stands (core.refine.outcome, transitions.parquet)."""

    BRACKETED = "bracketed"  # the deeper net loses below a size and wins above it
    CENSORED_LOW = "censored_low"  # the deeper net already wins at the smallest size tried
    CENSORED_HIGH = "censored_high"  # the deeper net never wins inside the range
    NON_MONOTONE = (
        "non_monotone"  # Δ changes sign more than once (or − to +): every crossing listed
    )
    UNDECIDED = "undecided"  # Δ within seed noise where it would decide


CENSORED_STATUSES = (TransitionStatus.CENSORED_LOW, TransitionStatus.CENSORED_HIGH)


class PointKind(StrEnum):
    """What trained a pair point: its first points, a verify step (more seeds), a cut inside
    the bracket, a scan step (a probe for a second sign change beside the bracket) or an
    extension beyond a censored edge."""

    GRID = "grid"  # a pair's first points, wherever its design placed them ("grid" on disk)
    VERIFY = "verify"
    CUT = "bisect"  # a cut inside the bracket (StepKind.CUT)
    SCAN = "scan"
    EXTEND = "extend"


class StepKind(StrEnum):
    """What the refine stage does next for a pair."""

    VERIFY = "verify"  # add seeds at a point within noise
    # train both depths at a new size inside the bracket, where the design cuts it (the grid
    # design's midpoint, the law design's interpolated cut); "bisect" on disk, as written before
    CUT = "bisect"
    SCAN = "scan"  # train both depths at a new size beside the bracket (non_monotone search)
    EXTEND = "extend"  # law design: train both depths beyond a censored pair's decided edge
    DONE = "done"


class Design(StrEnum):
    """Where a pair's first points lie (``refine.design``): the dense grid of
    ``space.budgets`` for every depth, or two sizes per pair around the reference law's N*."""

    GRID = "grid"
    LAW = "law"


# The reason of a verify step that checks a point which closes a bracket again, with twice its
# seeds: the refine stage marks the point it trains as re-verified.
REVERIFY = "re-verify"


class Trainer(StrEnum):
    """What trains a shape (the spec's ``trainer``)."""

    TORCH = "torch"
    SIMULATED = "simulated"  # a planted loss surface (dwtune.backends.simulated)


class SizeConvention(StrEnum):
    """How a model's size N is counted (``model.size_convention``)."""

    NON_EMBEDDING = "non_embedding"  # 12·L·dx², the paper's
    TOTAL = "total"  # the exact count, embeddings included


class Parametrization(StrEnum):
    """How rates and initialisation scale with width and depth (``model.parametrization``)."""

    SP = "sp"  # standard
    MUP = "mup"  # μP for Adam
    COMPLETEP = "completep"  # μP plus residual branches ×base_depth/L


class Runner(StrEnum):
    """Where a study's trials train (``dwtune run --runner``, ``Study.run(runner=...)``)."""

    RAY = "ray"  # Ray Tune, trials in parallel
    LOCAL = "local"  # this process, one after another, no Ray


class FitStatus(StrEnum):
    """What fit.json holds (its ``status``)."""

    FITTED = "fitted"  # a law, its errors and intervals
    INSUFFICIENT = "insufficient"  # what was found instead, and why no law


# The label every output of the simulated trainer carries, so no one mistakes it for a
# measurement: banners, figure titles and watermarks, TensorBoard runs.
SIMULATED_LABEL = "SIMULATED"
SIMULATED_BANNER = f"{SIMULATED_LABEL} DATA: a planted loss surface, not a measurement of any model"
SIMULATED_LAW_BANNER = f"{SIMULATED_LABEL} data: a planted law, not a measurement"
SIMULATED_TITLE = SIMULATED_LABEL + " DATA  ·  {}"  # a figure's title, formatted with it
# The flag every table of results, fit.json and the JSON outputs carry: True on simulated data.
SIMULATED_COLUMN = "simulated"


# Bracketed transitions the law ln dx* = a + b·L is fitted on, at least: its two parameters and
# one more, so that its scatter has a degree of freedom (the fit, the report, refine.waves).
FIT_MIN_PAIRS = 3

# The level of every interval dwtune reports (fit, projection, bootstrap, report, analyze) unless
# a command's --level asks for another.
LEVEL = 0.95


# The trial statuses as plain strings, for what trainers put in their metric dicts: those end
# up in checkpoints, and torch.load(weights_only=True) refuses any class it does not know,
# an enum included.
STATUS_FINISHED = TrialStatus.FINISHED.value
STATUS_EARLY_STOPPED = TrialStatus.EARLY_STOPPED.value
STATUS_DIVERGED = TrialStatus.DIVERGED.value
STATUS_FAILED = TrialStatus.FAILED.value
# A training that produced a usable final validation loss.
COMPLETED_STATUSES = (TrialStatus.FINISHED, TrialStatus.EARLY_STOPPED)

# Standard error of val/loss over its evaluation batches (nats): the evaluation's own sampling
# error, reported beside val/loss by the trainers.
VAL_LOSS_SE = "val/loss_se"
# Each held-out window's loss (nats, blocked beyond 256) at the evaluation that gave the best
# val/loss: sent once, with the final status; a record's `val_windows`, never a curve scalar.
VAL_WINDOWS = "val/window_losses"

# Scalars written to TensorBoard and curves.parquet, in this order.
CURVE_SCALARS = (
    TRAIN_LOSS,
    VAL_LOSS,
    VAL_BEST_LOSS,
    LR,
    GRAD_NORM,
    TOKENS_PER_S,
    STEP_TIME_S,
    MFU,
    VAL_LOSS_SE,
)


STAGES = tuple(Stage)
# Stages whose trials train another length than the spec's: never a grid or refine point.
OTHER_LENGTH_STAGES = (Stage.LR_SEARCH, Stage.LENGTH_CHECK)

# Where a trial's learning rate came from (trials.parquet ``lr_source``).
LR_SOURCE_SPEC = "spec"  # train.lr, one rate for every shape
LR_SOURCE_SEARCH = "search"  # the best rate of the cell's own search
LR_SOURCE_INTERPOLATED = "interpolated"  # ln-width interpolation of the grid's best rates
LR_SOURCE_PROPOSED = "proposed"  # an lr_search trial: the rate Optuna proposed
LR_SOURCES = (LR_SOURCE_SPEC, LR_SOURCE_SEARCH, LR_SOURCE_INTERPOLATED, LR_SOURCE_PROPOSED)
# --------------------------------------------------------------------------- experiment files
# Names inside an experiment directory (<storage>/<spec name>/).
TRIALS_FILE = "trials.parquet"
CURVES_FILE = "curves.parquet"
TRANSITIONS_FILE = "transitions.parquet"
FIT_FILE = "fit.json"
PROJECTIONS_FILE = "projections.parquet"
REPORT_FILE = "report.md"
FIGURES_DIR = "figures"
TB_DIR = "tb"
TB_FIT_DIR = "fit"  # under TB_DIR: the fit's scalars
TRIAL_RECORDS_DIR = "trials"  # one JSON record per trial
REFINE_DIR = "refine"  # the refine stage's Optuna journal (REFINE_JOURNAL), one study per pair
LR_SEARCH_DIR = "lr_search"  # one Optuna journal per searched cell
RAY_DIR = "ray"  # one folder per Ray Tune run
# One folder per unfinished trial: its checkpoints (a sharded trial's Ray Train run), removed
# once the trial is recorded with a final status (dwtune.study.runners.ray_tune.trial).
TRAIN_DIR = "train"
JOURNAL_SUFFIX = ".journal"
# Under REFINE_DIR: one Optuna storage for every pair (a study named after the pair), so one
# optuna-dashboard shows them all. Experiments written before hold <Ls>-<Ld>.journal per pair.
REFINE_JOURNAL = "optuna.journal"
SPEC_FILE = "spec.yaml"


class Figure(StrEnum):
    """The report's figures (under FIGURES_DIR) and `dwtune analyze --report`'s."""

    LOSS_VS_SIZE = "1_loss_vs_size.png"
    DELTA_PER_PAIR = "2_delta_per_pair.png"
    FIT = "3_fit_width_vs_depth.png"
    PROJECTION = "4_projection.png"
    LOSS_CURVES = "5_loss_curves.png"
    LAW_CHECKS = "6_law_checks.png"
    BEST_LR = "6_best_lr_vs_width.png"
    ANALYSIS_DELTAS = "analysis_deltas.png"


# Where a pair's paired-Δ noise came from (transitions.parquet `noise_source`).
NOISE_MEASURED = "measured"  # the seeds gave degrees of freedom (the prior's pseudo-obs. too)
NOISE_PRIOR = "prior"  # no two seeds at any point yet: the spec's guess on its pseudo-obs. alone
# `dwtune analyze` on one run per shape: each run's checkpoint-to-checkpoint jitter about a
# smooth curve in tokens (dwtune.core.analysis.jitter)
NOISE_CHECKPOINT_JITTER = "checkpoint_jitter"
# `dwtune analyze` on a table with neither replicates nor checkpoints: Δ's scatter about its
# own trend along ln N (dwtune.core.analysis.scatter)
NOISE_TREND_SCATTER = "trend_scatter"

# `dwtune analyze`: a pair's verdict (its JSON `status`), from the estimator's transition status.
ANALYSIS_CROSSES = "crosses"
ANALYSIS_DEEPER_WINS = "deeper_wins_throughout"
ANALYSIS_DEEPER_LOSES = "deeper_loses_throughout"
ANALYSIS_STATUS: dict[str, str] = {
    TransitionStatus.BRACKETED: ANALYSIS_CROSSES,
    TransitionStatus.CENSORED_LOW: ANALYSIS_DEEPER_WINS,
    TransitionStatus.CENSORED_HIGH: ANALYSIS_DEEPER_LOSES,
    TransitionStatus.NON_MONOTONE: TransitionStatus.NON_MONOTONE,
    TransitionStatus.UNDECIDED: TransitionStatus.UNDECIDED,
}
# A Δ point held against a law's predicted sign.
AGREEMENT_AGREES = "agrees"
AGREEMENT_DISAGREES = "disagrees"
AGREEMENT_WITHIN_NOISE = "within_noise"  # the sign rule decided no sign: not a disagreement
# the law is silent: its optimal depth lies between the pair's depths, or N is inside the
# law's own interval of a transition size (dwtune.core.analysis.verdicts)
AGREEMENT_NO_PREDICTION = "no_prediction"
# Roles of a runs table's columns (`dwtune analyze --columns ROLE=COLUMN`).
RUN_COLUMNS_REQUIRED = ("depth", "width", "params", "loss")
RUN_COLUMNS_OPTIONAL = ("seed", "tokens", "step", "run")
# Every paired Δ of the refine stage, per (pair, point, seed): the study bootstrap's input.
PAIR_DELTAS_FILE = "pair_deltas.parquet"
# N* of each bracketed pair re-estimated at other training lengths (refine.length_check).
LENGTH_CHECK_FILE = "length_check.parquet"
