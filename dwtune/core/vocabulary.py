"""The one metric vocabulary.

Every producer (torch trainer, simulated backend) reports these keys; every consumer (Ray Tune,
bisection, Parquet, TensorBoard, report) reads them. Never spell a metric name anywhere else.
"""

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
# Final status of a training: "finished", "early_stopped", "diverged" (set in the last report).
STATUS = "status"

STATUS_FINISHED = "finished"
STATUS_EARLY_STOPPED = "early_stopped"
STATUS_DIVERGED = "diverged"
STATUS_FAILED = "failed"
# A training that produced a usable final validation loss.
COMPLETED_STATUSES = (STATUS_FINISHED, STATUS_EARLY_STOPPED)

# Standard error of val/loss over its evaluation batches (nats): the evaluation's own sampling
# error, reported beside val/loss by the trainers.
VAL_LOSS_SE = "val/loss_se"

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

# Outcome of a depth pair (transitions.parquet `status`, dwtune.core.crossing).
TRANSITION_BRACKETED = "bracketed"
TRANSITION_CENSORED_LOW = "censored_low"  # the deeper net wins throughout the range
TRANSITION_CENSORED_HIGH = "censored_high"  # the deeper net loses throughout the range
TRANSITION_NON_MONOTONE = "non_monotone"  # Δ changes sign more than once (or − to +)
TRANSITION_UNDECIDED = "undecided"
TRANSITION_STATUSES = (
    TRANSITION_BRACKETED,
    TRANSITION_CENSORED_LOW,
    TRANSITION_CENSORED_HIGH,
    TRANSITION_NON_MONOTONE,
    TRANSITION_UNDECIDED,
)
# Where a pair's paired-Δ noise came from (transitions.parquet `noise_source`).
NOISE_MEASURED = "measured"
NOISE_PRIOR = "prior (fallback)"

# Every paired Δ of the refine stage, per (pair, point, seed): the study bootstrap's input.
PAIR_DELTAS_FILE = "pair_deltas.parquet"
