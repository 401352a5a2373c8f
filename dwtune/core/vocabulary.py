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

# Scalars written to TensorBoard and curves.parquet, in this order.
CURVE_SCALARS = (TRAIN_LOSS, VAL_LOSS, VAL_BEST_LOSS, LR, GRAD_NORM, TOKENS_PER_S, STEP_TIME_S, MFU)

# Stages a trial is trained for (trials.parquet ``stage``).
STAGE_GRID = "grid"
STAGE_REFINE = "refine"
STAGE_LR_SEARCH = "lr_search"  # a reduced-fidelity trial of a per-shape learning-rate search
STAGES = (STAGE_GRID, STAGE_REFINE, STAGE_LR_SEARCH)

# Where a trial's learning rate came from (trials.parquet ``lr_source``).
LR_SOURCE_SPEC = "spec"  # train.lr, one rate for every shape
LR_SOURCE_SEARCH = "search"  # the best rate of the cell's own search
LR_SOURCE_INTERPOLATED = "interpolated"  # ln-width interpolation of the grid's best rates
LR_SOURCE_PROPOSED = "proposed"  # an lr_search trial: the rate Optuna proposed
LR_SOURCES = (LR_SOURCE_SPEC, LR_SOURCE_SEARCH, LR_SOURCE_INTERPOLATED, LR_SOURCE_PROPOSED)
