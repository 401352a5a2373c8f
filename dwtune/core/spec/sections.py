"""One small frozen dataclass per concern of a study spec: a pydantic dataclass whose field
types coerce and whose rules refuse (dwtune.core.spec.fields); checks across a section's fields
are its ``__post_init__``."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Annotated

from dwtune.core.budget import SIZE_CONVENTIONS
from dwtune.core.errors import InputError, shown
from dwtune.core.spec import checks, limits
from dwtune.core.spec.fields import (
    Bool,
    Budgets,
    Depths,
    Float,
    Floats,
    Int,
    OptFloat,
    OptInt,
    OptStr,
    Pairs,
    Rule,
    Seeds,
    Sizes,
    Str,
    Strs,
    choice,
    coerce,
    distinct,
    each,
    entries,
    expect,
    least,
    most,
    positive,
    section,
    within,
)
from dwtune.core.vocabulary import Design, Parametrization, SizeConvention, Trainer

TOKENIZERS = ("char", "bpe")
SCHEDULES = ("cosine", "linear", "constant")
TRAINERS = tuple(Trainer)
BUILTIN_CORPORA = ("shakespeare",)
REFERENCE_FITS = ("levine2020",)
# model.parametrization: standard, μP (Adam), CompleteP (μP + 1/L residual branches);
# the rules are in dwtune.core.parametrization.
PARAMETRIZATIONS = tuple(Parametrization)
COMPARISONS = ("params", "flops")  # space.compare: equal parameters or equal training FLOPs
SWITCHES = ("auto", "true", "false")  # train.compile, train.activation_checkpointing
LR_SEARCH_SCALES = ("log",)
LR_REFINE_MODES = ("search", "interpolate")  # dwtune.core.projection holds their constants
DESIGNS = tuple(d.value for d in Design)
DEVICES = ("auto", "cpu", "cuda")
FUSE_POLICIES = ("auto", "always", "never")  # resources.fuse_seeds
TRACKERS = ("wandb", "mlflow")  # trackers.log_to: W&B, MLflow (the extras of those names)
# Loss surfaces of the simulated backend; formulas in dwtune.backends.simulated's docstring.
SIMULATED_SURFACES = (
    "default",
    "depth_noise",
    "non_monotone",
    "outliers",
    "divergences",
    "lr_mistuned",
    "asymmetric",
    "flat",
    "size_noise",
)
# Validation curves of the simulated backend (simulated.curve): interpolated (a partial Δ
# already has the final sign) or late_descent (the deeper net descends later, noisy evals).
SIMULATED_CURVES = ("interpolated", "late_descent")


def _gpu_share(name: str, gpu: float) -> None:
    if 0 < gpu < 1 and not math.isclose(1 / gpu, round(1 / gpu)):
        raise InputError(f"{name}: got {gpu}; fractions must divide 1 (0.5, 0.25, 0.125)")
    if gpu > 1 and gpu != int(gpu):
        raise InputError(f"{name}: got {gpu}; above 1 use whole GPUs")


Positive = Annotated[Float, positive]
Steps = Annotated[Int, least(1), most(limits.MAX_STEPS)]
Share = Annotated[Float, within(0.0, 1.0)]
Nonnegative = Annotated[Float, least(0)]
Probability = Annotated[Float, within(0, 1)]
Planted = Annotated[Float, within(-limits.MAX_SIMULATED_ABS, limits.MAX_SIMULATED_ABS)]
Workers = Annotated[Int, least(1), most(limits.MAX_CONCURRENT)]
Fidelity = Annotated[
    Float,
    expect(
        lambda x: 0 < x <= 1,
        "0 < x <= 1 (the share of the real training's steps a search trial trains, e.g. 0.25)",
    ),
]
EarlyFraction = Annotated[
    Float, expect(lambda x: 0 < x < 1, "a fraction of the training steps in (0, 1), e.g. 0.3")
]
BUDGET = (positive, most(limits.MAX_BUDGET))
SpaceDepths = Annotated[
    Depths, entries(limits.MAX_DEPTHS), each(least(1), most(limits.MAX_DEPTH)), distinct("depths")
]
SpaceBudgets = Annotated[Budgets, entries(limits.MAX_BUDGETS), each(*BUDGET)]
FitBudgets = Annotated[Sizes, entries(limits.MAX_FIT_BUDGETS), each(*BUDGET)]
SpaceSeeds = Annotated[
    Seeds, entries(limits.MAX_SEEDS, "count"), each(within(0, limits.MAX_SEED)), distinct("seeds")
]


@section("data")
class DataConfig:
    # built-in name, or a .txt/.jsonl/.parquet file (.txt/.jsonl also .gz/.zst), or a folder
    corpus: Str = "shakespeare"
    text_column: Str = "text"  # for Parquet and JSON Lines corpora
    tokenizer: Annotated[Str, choice(TOKENIZERS)] = "char"
    # Embedding rows. For `char` an upper bound on distinct characters (rows past them stay
    # unused), so that plans know the exact parameter count without reading the corpus.
    vocab_size: Annotated[Int, least(2), most(limits.MAX_VOCAB)] = 128
    seq_len: Annotated[Int, least(2), most(limits.MAX_SEQ_LEN)] = 128
    val_fraction: Annotated[Float, expect(lambda x: 0 < x < 0.5, "0 < x < 0.5")] = 0.1
    cache_dir: Str = "~/.cache/dwtune"
    # BPE merges are learnt from at most this many MB of the training split (evenly spaced).
    bpe_sample_mb: Positive = 100.0
    # Refuse a study whose trials read the training split more often than this. Records keep
    # the best validation loss over the run, so past a few epochs Δ would measure when a shape
    # starts to overfit rather than its capacity; 4 keeps repetition within what Muennighoff et
    # al. 2023 found nearly as good as fresh data. Not part of the trial identity (a guard).
    max_epochs: Positive = 4.0


@section("model")
class ModelConfig:
    # per layer, at every width (the paper's setting)
    heads: Annotated[Int, least(1), most(limits.MAX_HEADS)] = 2
    mlp_ratio: Annotated[Positive, most(limits.MAX_MLP_RATIO)] = 4.0
    # widths are multiples of lcm(heads, width_multiple)
    width_multiple: Annotated[Int, least(1), most(limits.MAX_WIDTH_MULTIPLE)] = 8
    tied_embeddings: Bool = True
    bias: Bool = False
    # 12·L·dx² as in the paper, or the exact total count (a SizeConvention)
    size_convention: Annotated[Str, choice(SIZE_CONVENTIONS)] = SizeConvention.NON_EMBEDDING.value
    # Fixed head width instead of a fixed head count: heads = width / head_dim (the loader
    # refuses both keys at once).
    head_dim: Annotated[OptInt, least(1)] = None
    # one of PARAMETRIZATIONS
    parametrization: Annotated[Str, choice(PARAMETRIZATIONS)] = Parametrization.SP.value
    base_width: OptInt = None  # mup, completep: the width the rates are tuned at
    base_depth: OptInt = None  # completep: the depth the rates are tuned at

    @property
    def width_step(self) -> int:
        """Widths are multiples of this: divisible by the heads (or head_dim) and alignment."""
        return math.lcm(self.head_dim or self.heads, self.width_multiple)

    def __post_init__(self) -> None:
        name = self.parametrization
        if name == Parametrization.SP:
            return
        if self.base_width is None:
            raise InputError(
                f"model.base_width: missing with parametrization {name}; give the width the "
                f"learning rate is tuned at, a multiple of {self.width_step}, e.g. base_width: "
                f"{self.width_step * max(1, 256 // self.width_step)}"
            )
        if self.base_width < 1 or self.base_width % self.width_step:
            raise InputError(
                f"model.base_width: got {self.base_width}; expected a valid width, a positive "
                f"multiple of {self.width_step} (heads or head_dim and width_multiple)"
            )
        if name == Parametrization.COMPLETEP and (self.base_depth is None or self.base_depth < 1):
            raise InputError(
                f"model.base_depth: got {self.base_depth}; parametrization completep needs the "
                f"depth the rates are tuned at, an integer >= 1, e.g. base_depth: 2"
            )

    def identity(self) -> dict[str, object]:
        """The model knobs that enter a trial's identity beyond its shape: only a parametrisation
        other than sp (heads and head_dim already show in the shape)."""
        if self.parametrization == Parametrization.SP:
            return {}
        return {
            "parametrization": self.parametrization,
            "base_width": self.base_width,
            "base_depth": self.base_depth
            if self.parametrization == Parametrization.COMPLETEP
            else None,
        }


@section("space")
class SpaceConfig:
    depths: SpaceDepths
    budgets: SpaceBudgets  # a list, or {min, max, num} log-spaced
    seeds: SpaceSeeds = (0,)  # a list of seeds, or a count n meaning 0..n-1
    # params: budgets are sizes; flops: budgets are training FLOPs (flops_per_token × tokens),
    # so the nets of one cell spend the same compute
    compare: Annotated[Str, choice(COMPARISONS)] = "params"

    def __post_init__(self) -> None:
        trials = len(self.depths) * len(self.budgets) * len(self.seeds)
        checks.at_most("space (depths x budgets x seeds trials)", trials, limits.MAX_GRID_TRIALS)


@section("train.lr")
class LrSearchConfig:
    """``train.lr: {search: log, min, max, trials, fidelity, refine}``: a learning-rate search
    per shape (dwtune.study.lr_search): ``trials`` rates drawn log-uniformly in [min, max],
    each trained for ``fidelity`` of the real steps, poor ones stopped early by ASHA."""

    search: Annotated[Str, choice(LR_SEARCH_SCALES)] = "log"
    min: Positive = 1e-4
    max: Positive = 3e-2
    trials: Annotated[Int, least(1)] = 8
    fidelity: Fidelity = 0.25  # share of the real training's steps a search trial trains
    # refine sizes: their own search, or interpolate in ln width
    refine: Annotated[Str, choice(LR_REFINE_MODES)] = "search"

    def __post_init__(self) -> None:
        if self.min >= self.max:
            raise InputError(
                f"train.lr: got min {self.min:g} >= max {self.max:g}; expected min < max, "
                f"e.g. min: 1e-4, max: 3e-2"
            )

    @property
    def midpoint(self) -> float:
        """Geometric mid-rate: ``train.lr`` of a spec whose rate is searched (never trained)."""
        return math.sqrt(self.min * self.max)


def _lr_search(name: str, value: object) -> object:
    if value is None or isinstance(value, dict | LrSearchConfig):  # None: a resolved spec.yaml
        return value
    raise InputError(
        f"{name}: got {shown(value)}; expected a search such as "
        f"{{search: log, min: 1e-4, max: 3e-2, trials: 8, fidelity: 0.25}}"
    )


@section("train")
class TrainConfig:
    # give one of steps, tokens (tokens / (batch_size·seq_len) steps)
    steps: Annotated[OptInt, least(1), most(limits.MAX_STEPS)] = None
    tokens: Annotated[OptInt, least(1), most(limits.MAX_TOKENS)] = None
    batch_size: Annotated[Int, least(1), most(limits.MAX_BATCH_SIZE)] = 16
    lr: Annotated[Float, most(limits.MAX_LR), positive] = 3e-3
    warmup_steps: Annotated[Int, least(0), most(limits.MAX_STEPS)] = 100
    # linear warm-up, then cosine decay to min_lr_ratio·lr
    schedule: Annotated[Str, choice(SCHEDULES)] = "cosine"
    min_lr_ratio: Share = 0.0
    weight_decay: Nonnegative = 0.1
    beta1: Share = 0.9
    beta2: Share = 0.95
    grad_clip: Nonnegative = 1.0
    eval_every: Steps = 100  # steps between validation passes
    # fixed held-out batches per validation pass
    eval_batches: Annotated[Int, least(1), most(limits.MAX_EVAL_BATCHES)] = 20
    # steps without val improvement before stopping; None = off
    patience: Annotated[OptInt, most(limits.MAX_STEPS), least(1)] = None
    compile: Annotated[Str, choice(SWITCHES)] = "auto"  # auto = on for CUDA, off for CPU
    device: Annotated[Str, choice(DEVICES)] = "auto"  # auto | cpu | cuda
    # training tokens = tokens_per_param × N (the cell's size): a third alternative to steps
    tokens_per_param: Annotated[OptFloat, positive] = None
    # a per-shape learning-rate search (``lr: {search: ...}`` in YAML); ``lr`` is then its
    # geometric midpoint and no training uses it
    lr_search: Annotated[LrSearchConfig | None, coerce(_lr_search)] = None
    # How a step's batch is split, not what is trained (so not in a trial's identity, see
    # SPLIT_FIELDS): sequences per forward/backward pass, the gradients of a step's passes
    # accumulated before one optimiser step (None: the whole batch where it fits, else the
    # fewest passes the memory model fits, dwtune.core.memory.micro_batches), and activation
    # checkpointing per block (auto: only where no micro-batch fits without it).
    micro_batch_size: Annotated[OptInt, least(1)] = None
    activation_checkpointing: Annotated[Str, choice(SWITCHES)] = "auto"  # auto | true | false

    def __post_init__(self) -> None:
        lengths = (self.steps, self.tokens, self.tokens_per_param)
        if sum(value is not None for value in lengths) != 1:
            raise InputError(
                "train: got both or neither of steps and tokens; give exactly one of steps, "
                "tokens and tokens_per_param"
            )
        if self.micro_batch_size is not None and self.micro_batch_size > self.batch_size:
            raise InputError(
                f"train.micro_batch_size: got {self.micro_batch_size}; expected at most "
                f"train.batch_size ({self.batch_size}), or leave it out to let the memory "
                f"model choose"
            )

    def lr_at(self, step: int, total_steps: int) -> float:
        """Learning rate of the update made at 0-based ``step``: linear warm-up, then decay
        (cosine or linear to min_lr_ratio·lr, or constant). One formula for every backend."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.schedule == "constant":
            return self.lr
        floor = self.min_lr_ratio * self.lr
        span = max(1, total_steps - self.warmup_steps)
        progress = min((step - self.warmup_steps) / span, 1.0)  # [0, 1]
        if self.schedule == "linear":
            return floor + (self.lr - floor) * (1.0 - progress)
        return floor + (self.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def total_steps(self, seq_len: int) -> int:
        if self.steps is not None:
            return self.steps
        if self.tokens is None:  # programming error: trial_spec resolves tokens_per_param
            raise ValueError("tokens_per_param needs the cell's size: use records.trial_spec")
        return max(1, self.tokens // (self.batch_size * seq_len))

    @property
    def checkpointing(self) -> bool | None:
        """activation_checkpointing as a choice: None lets the memory model decide."""
        return (
            None
            if self.activation_checkpointing == "auto"
            else (self.activation_checkpointing == "true")
        )

    def identity(self) -> dict[str, object]:
        """The training config in a trial's identity: the fields added after the first
        identities only when set; never how a batch is split (SPLIT_FIELDS)."""
        values = dataclasses.asdict(self)
        for name in ("tokens_per_param", "lr_search"):
            if values[name] is None:
                values.pop(name)
        for name in SPLIT_FIELDS:
            values.pop(name)
        return values


# How a step is computed, not what it computes: micro-batches accumulate to the same gradient
# (same tokens, same optimiser step, same loss up to float summation order, which the trainer's
# CPU test bounds at 1e-5 relative), and checkpointing recomputes the same forward. A trial
# keeps its identity, its resumable checkpoints and its experiment directory whatever split
# the memory of the GPU it lands on needs.
SPLIT_FIELDS = ("micro_batch_size", "activation_checkpointing")


@section("refine")
class RefineConfig:
    pairs: Pairs = ()  # (shallower, deeper) depth pairs
    tolerance: Positive = 0.1  # stop once N_high / N_low - 1 <= tolerance
    seeds: Annotated[Int, least(1)] = 1  # paired seeds trained at each proposed size
    # seeds added while |Δ| is within noise
    max_seeds: Annotated[Int, most(limits.MAX_REFINE_SEEDS)] = 3
    # bisection rounds per pair
    max_rounds: Annotated[Int, least(0), most(limits.MAX_ROUNDS)] = 8
    # two-sided false-sign rate of the one sign rule at a true Δ of 0 over all its looks (one
    # look per added seed up to max_seeds; Pocock-type α-spending, core/refine/sequential.py)
    alpha: Annotated[Float, expect(lambda x: 0 < x < 0.5, "a number in (0, 0.5)")] = 0.05
    # a guess of the paired-Δ sd (nats), worth noise_prior_dof pseudo-observations: the seeds
    # outweigh it as they come in (core/refine/noise.py); it is never taken as known
    noise_prior: Positive = 0.003
    noise_prior_dof: Annotated[Positive, most(limits.MAX_PRIOR_DOF)] = 0.25
    # Scan for a second sign change (dwtune.core.refine.steps): once a pair is bracketed, probe
    # every gap wider than scan_spacing e-folds of N within scan_reach e-folds of the bracket.
    # A dip of Δ narrower than the spacing can slip between probes; 0 turns the scan off.
    scan_spacing: Nonnegative = 0.35
    scan_reach: Annotated[Nonnegative, most(limits.MAX_SCAN_REACH)] = 2.5
    # training-length robustness: factors on the training length at which each bracketed
    # pair's N* is re-estimated after the refine stage (dwtune.study.length_check); () = off
    length_check: Annotated[Floats, Rule(checks.length_factors)] = ()
    # Where each pair's first points lie (core/refine/design.py): "grid" trains every depth at every
    # space.budgets; "law" trains each pair's two depths at N*·e^(±reach) of fit.reference's
    # law (e-folds of N), widening beyond a censored edge (or, where no sign is decided, towards
    # the side the mean Δ leans to) inside space.budgets' range.
    design: Annotated[Str, choice(DESIGNS)] = Design.GRID.value
    reach: Annotated[Positive, most(limits.MAX_SCAN_REACH)] = 0.35
    # Law design only (the grid design ignores it): the pairs, ranked by depth, refine in this
    # many waves one after another. The first wave's sizes come from fit.reference; each later
    # wave's from the law fitted on the waves before it (core/fit/censored.py: running_law),
    # so the first must hold 3 pairs. 1: every pair at once.
    waves: Annotated[Int, least(1)] = 1
    # Early decisions (dwtune.core.refine.early): stop a point's trainings once their partial
    # curves settle the end Δ's sign at refine.alpha, no earlier than early_min_fraction of the
    # steps; the point's sign is then the early rule's. Needs evals along the run (eval_every).
    early_stop: Bool = False
    early_min_fraction: EarlyFraction = 0.3

    def __post_init__(self) -> None:
        if self.scan_spacing:  # bounds the probes per pair: reach / spacing on each side
            spacing = self.scan_reach / limits.MAX_ROUNDS
            checks.at_least("refine.scan_spacing", self.scan_spacing, spacing)
        checks.at_least("refine.max_seeds", self.max_seeds, self.seeds)


@section("fit")
class FitConfig:
    budgets: FitBudgets = (1.75e11, 1e12, 1e13)  # sizes to project the best shape for
    # published fit drawn beside the study's
    reference: Annotated[Str, choice(REFERENCE_FITS)] = "levine2020"


@section("resources")
class ResourcesConfig:
    cpu: Annotated[Positive, most(limits.MAX_CONCURRENT)] = 1.0  # per trial
    # per trial; fractions must divide 1 (0.5, 0.25, ...)
    gpu: Annotated[Nonnegative, Rule(_gpu_share), most(limits.MAX_CONCURRENT)] = 0.0
    # None: as many as resources allow
    max_concurrent: Annotated[OptInt, least(1), most(limits.MAX_CONCURRENT)] = None
    # re-runs of a failed trial before it is recorded as failed
    retries: Annotated[Int, least(0), most(limits.MAX_RETRIES)] = 1
    # Memory of one GPU (GiB) for packing checks; None: from `dwtune plan --device`.
    gpu_memory_gb: Annotated[OptFloat, positive] = None
    # Data-parallel workers one trial may span (a Ray Train job, parameters sharded with
    # FSDP2); each worker holds `cpu` CPUs and `gpu` GPUs. On GPUs a cell is sharded only when
    # no micro-batch lets one GPU hold it (known gpu_memory_gb or `plan --device`), over the
    # fewest workers that hold it, each in the fewest micro-batches; on CPU, or with the GPU
    # memory unknown, every cell uses all of them.
    workers_per_trial: Workers = 1
    # Node-local scratch for a trial's checkpoint staging (a node's NVMe); None: the system's
    # temporary folder.
    scratch_dir: OptStr = None
    # Seeds of one shape trained as one fused model (dwtune.core.sharding.fused_seeds):
    # "auto" fuses on GPUs only, where a small model's step is launch-bound; on CPU fusing
    # measured no faster (benchmarks/README.md, "Fused seeds"); "always" fuses on CPU too.
    fuse_seeds: Annotated[Str, choice(FUSE_POLICIES)] = "auto"

    def __post_init__(self) -> None:
        if self.workers_per_trial > 1 and self.gpu not in (0, 1):
            raise InputError(
                f"resources.gpu: got {self.gpu:g} with workers_per_trial "
                f"{self.workers_per_trial}; a sharded trial's workers hold one whole GPU each: "
                f"use gpu 1 (or 0 on CPU)"
            )
        if self.scratch_dir is not None and not os.path.isabs(os.path.expanduser(self.scratch_dir)):
            # every node resolves it for itself: a relative path would follow Tune's trial cwd
            raise InputError(
                f"resources.scratch_dir: got {self.scratch_dir!r}; use an absolute path on "
                f"each node's local disk (e.g. /local_nvme/dwtune) or leave it out"
            )


@section("trackers")
class TrackersConfig:
    # Experiment trackers every trial logs to through Ray Tune's own callbacks, and the refine
    # decisions and the fit after their stages: any of "wandb", "mlflow" (`dwtune run --log-to`
    # adds to these). Each needs its extra: pip install 'dwtune[wandb]' or 'dwtune[mlflow]'.
    log_to: Annotated[Strs, each(choice(TRACKERS)), distinct("trackers")] = ()
    # W&B project and MLflow experiment name; None: the spec's name
    project: OptStr = None
    # MLflow tracking URI; None: $MLFLOW_TRACKING_URI, else a file store in <experiment>/mlruns
    mlflow_uri: OptStr = None


@section("simulated")
class SimulatedConfig:
    """Planted law, noise and surface of the simulated backend (see dwtune.backends.simulated).

    The fields after ``seed_correlation`` shape the hard surfaces; each one enters a trial's
    identity only when it differs from its default (``identity``), so experiment
    directories made before they existed still resume.
    """

    a: Planted = 5.039  # planted ln dx* = a + b·L
    b: Planted = 0.0555
    # seed-to-seed standard deviation of the final loss (nats)
    noise: Annotated[Planted, least(0)] = 0.002
    # optional sleep per reported step, to rehearse scheduling
    seconds_per_step: Annotated[Float, most(limits.MAX_SECONDS_PER_STEP), least(0)] = 0.0
    # largest loss gap (nats) one planted depth pair opens far from its N*
    gap: Annotated[Planted, least(0)] = 0.05
    # e-folds of N over which a pair's gap changes sign
    transition_scale: Annotated[Planted, positive] = 0.5
    seed_correlation: Probability = 0.5  # share of the noise variance a seed gives every depth
    # share of the rest a seed gives its depth at every size (its luck persists across sizes:
    # a paired Δ's seed deviation is correlated this much between sizes); 0: none
    seed_size_correlation: Probability = 0.0
    surface: Annotated[Str, choice(SIMULATED_SURFACES)] = "default"  # one of SIMULATED_SURFACES
    # depth_noise: noise sd(L) = noise·(1 + noise_depth_slope·(L − 1)),
    # gap(L) = gap / (1 + gap_depth_slope·(L − 1)) for the pair whose deeper depth is L
    noise_depth_slope: Nonnegative = 0.1
    gap_depth_slope: Nonnegative = 0.1
    # size_noise: noise sd(N) = noise·exp(noise_size_slope·ln(N / 1e8)), per e-fold of N
    noise_size_slope: Nonnegative = 0.15
    # non_monotone: a bump of depth dip_size·gap, dip_offset e-folds below ln N*, half-width
    # dip_width e-folds, pulls Δ below zero once before the real crossing
    dip_size: Nonnegative = 1.5
    dip_offset: Positive = 2.0
    dip_width: Positive = 0.5
    # outliers: a share of the trainings of depth >= outlier_min_depth ends outlier_size nats high
    outlier_share: Probability = 0.03
    outlier_size: Nonnegative = 0.1
    outlier_min_depth: Annotated[Int, least(0)] = 0
    # divergences: P = logistic(diverge_logit + diverge_depth_slope·L
    #                           + diverge_lr_slope·ln(lr / lr_opt))
    diverge_logit: Float = -4.0
    diverge_depth_slope: Float = 0.1
    diverge_lr_slope: Float = 2.0
    # learning-rate penalty (any surface; lr_mistuned needs it > 0), nats:
    # lr_penalty·ln²(lr / lr_opt(w)),  lr_opt(w) = lr_opt·(lr_base_width / w)^lr_width_exponent
    lr_penalty: Nonnegative = 0.0
    lr_opt: Positive = 3e-3
    lr_base_width: Positive = 256.0
    lr_width_exponent: Nonnegative = 1.0
    # asymmetric: above N* the deeper net wins by at most asymmetry_gap_ratio·gap, approached
    # as a power law of exponent asymmetry_power in the e-folds past N*
    asymmetry_gap_ratio: Positive = 0.4
    asymmetry_power: Positive = 0.5
    # training length (any surface): every planted N* scales by
    # (total steps / length_ref_steps)^length_exponent; 0 = the length does not matter
    length_exponent: Planted = 0.0
    length_ref_steps: Annotated[Int, least(1)] = 1000
    # the validation curve (any surface): interpolated, or late_descent, where a net of depth L
    # descends along progress^(1 + curve_lag·ln L) (a deeper net later) and every eval before
    # the last adds independent noise of sd curve_eval_noise (nats)
    curve: Annotated[Str, choice(SIMULATED_CURVES)] = "interpolated"
    curve_lag: Annotated[Planted, least(0)] = 0.1
    curve_eval_noise: Annotated[Planted, least(0)] = 0.001

    def __post_init__(self) -> None:
        if self.dip_width >= self.dip_offset:
            raise InputError(
                f"simulated.dip_width: got {self.dip_width!r}; expected less than "
                f"simulated.dip_offset ({self.dip_offset!r}) so the dip ends before N*"
            )
        if self.surface == "lr_mistuned" and self.lr_penalty == 0:
            raise InputError(
                "simulated.lr_penalty: got 0.0 with surface lr_mistuned; "
                "expected a positive penalty in nats, e.g. lr_penalty: 0.02"
            )

    def identity(self) -> dict[str, object]:
        """The fields that name the surface in a trial's identity: the seven original ones
        always, every later one only where it differs from its default."""
        values = dataclasses.asdict(self)
        original = ORIGINAL_SIMULATED_FIELDS
        return {
            f.name: values[f.name]
            for f in dataclasses.fields(self)
            if f.name in original or values[f.name] != f.default
        }


ORIGINAL_SIMULATED_FIELDS = frozenset(
    ("a", "b", "noise", "seconds_per_step", "gap", "transition_scale", "seed_correlation")
)
