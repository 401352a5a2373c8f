"""One small frozen dataclass per concern of a study spec; each validates itself on creation."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from dwtune.core.budget import SIZE_CONVENTIONS
from dwtune.core.errors import InputError
from dwtune.core.spec import checks, limits
from dwtune.core.spec.checks import at_least, at_most, finite, one_of, positive, within
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


@dataclass(frozen=True)
class DataConfig:
    # built-in name, or a .txt/.jsonl/.parquet file (.txt/.jsonl also .gz/.zst), or a folder
    corpus: str = "shakespeare"
    text_column: str = "text"  # for Parquet and JSON Lines corpora
    tokenizer: str = "char"
    # Embedding rows. For `char` an upper bound on distinct characters (rows past them stay
    # unused), so that plans know the exact parameter count without reading the corpus.
    vocab_size: int = 128
    seq_len: int = 128
    val_fraction: float = 0.1
    cache_dir: str = "~/.cache/dwtune"
    # BPE merges are learnt from at most this many MB of the training split (evenly spaced).
    bpe_sample_mb: float = 100.0
    # Refuse a study whose trials read the training split more often than this. Records keep
    # the best validation loss over the run, so past a few epochs Δ would measure when a shape
    # starts to overfit rather than its capacity; 4 keeps repetition within what Muennighoff et
    # al. 2023 found nearly as good as fresh data. Not part of the trial identity (a guard).
    max_epochs: float = 4.0

    def __post_init__(self) -> None:
        one_of("data.tokenizer", self.tokenizer, TOKENIZERS)
        positive("data.bpe_sample_mb", self.bpe_sample_mb)
        positive("data.max_epochs", self.max_epochs)
        at_least("data.vocab_size", self.vocab_size, 2)
        at_least("data.seq_len", self.seq_len, 2)
        at_most("data.vocab_size", self.vocab_size, limits.MAX_VOCAB)
        at_most("data.seq_len", self.seq_len, limits.MAX_SEQ_LEN)
        if not 0 < self.val_fraction < 0.5:
            raise InputError(f"data.val_fraction: got {self.val_fraction}; expected 0 < x < 0.5")


@dataclass(frozen=True)
class ModelConfig:
    heads: int = 2  # per layer, at every width (the paper's setting)
    mlp_ratio: float = 4.0
    width_multiple: int = 8  # widths are multiples of lcm(heads, width_multiple)
    tied_embeddings: bool = True
    bias: bool = False
    # 12·L·dx² as in the paper, or the exact total count (a SizeConvention)
    size_convention: str = SizeConvention.NON_EMBEDDING.value
    # Fixed head width instead of a fixed head count: heads = width / head_dim (the loader
    # refuses both keys at once).
    head_dim: int | None = None
    parametrization: str = Parametrization.SP.value  # one of PARAMETRIZATIONS
    base_width: int | None = None  # mup, completep: the width the rates are tuned at
    base_depth: int | None = None  # completep: the depth the rates are tuned at

    def __post_init__(self) -> None:
        at_least("model.heads", self.heads, 1)
        at_least("model.width_multiple", self.width_multiple, 1)
        positive("model.mlp_ratio", self.mlp_ratio)
        at_most("model.heads", self.heads, limits.MAX_HEADS)
        at_most("model.width_multiple", self.width_multiple, limits.MAX_WIDTH_MULTIPLE)
        at_most("model.mlp_ratio", self.mlp_ratio, limits.MAX_MLP_RATIO)
        one_of("model.size_convention", self.size_convention, SIZE_CONVENTIONS)
        if self.head_dim is not None:
            at_least("model.head_dim", self.head_dim, 1)
        one_of("model.parametrization", self.parametrization, PARAMETRIZATIONS)
        self._check_bases()

    @property
    def width_step(self) -> int:
        """Widths are multiples of this: divisible by the heads (or head_dim) and alignment."""
        return math.lcm(self.head_dim or self.heads, self.width_multiple)

    def _check_bases(self) -> None:
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


@dataclass(frozen=True)
class SpaceConfig:
    depths: tuple[int, ...]
    budgets: tuple[float, ...]  # a list, or {min, max, num} log-spaced
    seeds: tuple[int, ...] = (0,)  # a list of seeds, or a count n meaning 0..n-1
    # params: budgets are sizes; flops: budgets are training FLOPs (flops_per_token × tokens),
    # so the nets of one cell spend the same compute
    compare: str = "params"

    def __post_init__(self) -> None:
        one_of("space.compare", self.compare, COMPARISONS)
        if not self.depths:
            raise InputError("space.depths: got an empty list; expected depths such as [1, 2, 4]")
        at_most("space.depths (entries)", len(self.depths), limits.MAX_DEPTHS)
        for depth in self.depths:
            at_least("space.depths", depth, 1)
            at_most("space.depths", depth, limits.MAX_DEPTH)
        at_most("space.budgets (entries)", len(self.budgets), limits.MAX_BUDGETS)
        for budget in self.budgets:
            positive("space.budgets", budget)
            at_most("space.budgets", budget, limits.MAX_BUDGET)
        at_most("space.seeds (count)", len(self.seeds), limits.MAX_SEEDS)
        for seed in self.seeds:
            within("space.seeds", seed, 0, limits.MAX_SEED)
        trials = len(self.depths) * len(self.budgets) * len(self.seeds)
        at_most("space (depths x budgets x seeds trials)", trials, limits.MAX_GRID_TRIALS)
        if len(set(self.depths)) != len(self.depths):
            raise InputError(f"space.depths: got {list(self.depths)}; expected distinct depths")
        if not self.budgets:
            raise InputError("space.budgets: got an empty list; expected sizes such as [1e5, 1e6]")
        if not self.seeds:
            raise InputError("space.seeds: got nothing; expected a count >= 1 or a list of seeds")
        if len(set(self.seeds)) != len(self.seeds):
            raise InputError(f"space.seeds: got {list(self.seeds)}; expected distinct seeds")


@dataclass(frozen=True)
class LrSearchConfig:
    """``train.lr: {search: log, min, max, trials, fidelity, refine}``: a learning-rate search
    per shape (dwtune.study.lr_search): ``trials`` rates drawn log-uniformly in [min, max],
    each trained for ``fidelity`` of the real steps, poor ones stopped early by ASHA."""

    search: str = "log"
    min: float = 1e-4
    max: float = 3e-2
    trials: int = 8
    fidelity: float = 0.25  # share of the real training's steps a search trial trains
    refine: str = "search"  # refine sizes: their own search, or interpolate in ln width

    def __post_init__(self) -> None:
        one_of("train.lr.search", self.search, LR_SEARCH_SCALES)
        positive("train.lr.min", self.min)
        positive("train.lr.max", self.max)
        if self.min >= self.max:
            raise InputError(
                f"train.lr: got min {self.min:g} >= max {self.max:g}; expected min < max, "
                f"e.g. min: 1e-4, max: 3e-2"
            )
        at_least("train.lr.trials", self.trials, 1)
        if not (math.isfinite(self.fidelity) and 0 < self.fidelity <= 1):
            raise InputError(
                f"train.lr.fidelity: got {self.fidelity!r}; expected 0 < x <= 1 (the share of "
                f"the real training's steps a search trial trains, e.g. 0.25)"
            )
        one_of("train.lr.refine", self.refine, LR_REFINE_MODES)

    @property
    def midpoint(self) -> float:
        """Geometric mid-rate: ``train.lr`` of a spec whose rate is searched (never trained)."""
        return math.sqrt(self.min * self.max)


@dataclass(frozen=True)
class TrainConfig:
    steps: int | None = None  # give one of steps, tokens (tokens / (batch_size·seq_len) steps)
    tokens: int | None = None
    batch_size: int = 16
    lr: float = 3e-3
    warmup_steps: int = 100
    schedule: str = "cosine"  # linear warm-up, then cosine decay to min_lr_ratio·lr
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = 100  # steps between validation passes
    eval_batches: int = 20  # fixed held-out batches per validation pass
    patience: int | None = None  # steps without val improvement before stopping; None = off
    compile: str = "auto"  # auto = on for CUDA, off for CPU
    device: str = "auto"  # auto | cpu | cuda
    # training tokens = tokens_per_param × N (the cell's size): a third alternative to steps
    tokens_per_param: float | None = None
    # a per-shape learning-rate search (``lr: {search: ...}`` in YAML); ``lr`` is then its
    # geometric midpoint and no training uses it
    lr_search: LrSearchConfig | None = None
    # How a step's batch is split, not what is trained (so not in a trial's identity, see
    # SPLIT_FIELDS): sequences per forward/backward pass, the gradients of a step's passes
    # accumulated before one optimiser step (None: the whole batch where it fits, else the
    # fewest passes the memory model fits, dwtune.core.memory.micro_batches), and activation
    # checkpointing per block (auto: only where no micro-batch fits without it).
    micro_batch_size: int | None = None
    activation_checkpointing: str = "auto"  # auto | true | false

    def __post_init__(self) -> None:
        lengths = (self.steps, self.tokens, self.tokens_per_param)
        if sum(value is not None for value in lengths) != 1:
            raise InputError(
                "train: got both or neither of steps and tokens; give exactly one of steps, "
                "tokens and tokens_per_param"
            )
        if self.tokens_per_param is not None:
            positive("train.tokens_per_param", self.tokens_per_param)
        elif self.steps is not None:
            at_least("train.steps", self.steps, 1)
        elif self.tokens is not None:
            at_least("train.tokens", self.tokens, 1)
        for name in ("batch_size", "eval_every", "eval_batches"):
            at_least(f"train.{name}", getattr(self, name), 1)
        at_least("train.warmup_steps", self.warmup_steps, 0)
        self._check_maxima()
        positive("train.lr", self.lr)
        for name in ("beta1", "beta2", "min_lr_ratio"):
            within(f"train.{name}", getattr(self, name), 0.0, 1.0)
        at_least("train.weight_decay", self.weight_decay, 0)
        at_least("train.grad_clip", self.grad_clip, 0)
        one_of("train.schedule", self.schedule, SCHEDULES)
        one_of("train.compile", self.compile, SWITCHES)
        one_of("train.device", self.device, ("auto", "cpu", "cuda"))
        if self.patience is not None:
            at_least("train.patience", self.patience, 1)
        if self.micro_batch_size is not None:
            at_least("train.micro_batch_size", self.micro_batch_size, 1)
            if self.micro_batch_size > self.batch_size:
                raise InputError(
                    f"train.micro_batch_size: got {self.micro_batch_size}; expected at most "
                    f"train.batch_size ({self.batch_size}), or leave it out to let the memory "
                    f"model choose"
                )
        one_of("train.activation_checkpointing", self.activation_checkpointing, SWITCHES)

    def _check_maxima(self) -> None:
        for name in ("steps", "warmup_steps", "eval_every", "patience"):
            if getattr(self, name) is not None:
                at_most(f"train.{name}", getattr(self, name), limits.MAX_STEPS)
        if self.tokens is not None:
            at_most("train.tokens", self.tokens, limits.MAX_TOKENS)
        at_most("train.batch_size", self.batch_size, limits.MAX_BATCH_SIZE)
        at_most("train.eval_batches", self.eval_batches, limits.MAX_EVAL_BATCHES)
        at_most("train.lr", self.lr, limits.MAX_LR)
        finite("train.weight_decay", self.weight_decay)
        finite("train.grad_clip", self.grad_clip)

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


@dataclass(frozen=True)
class RefineConfig:
    pairs: tuple[tuple[int, int], ...] = ()  # (shallower, deeper) depth pairs
    tolerance: float = 0.1  # stop once N_high / N_low - 1 <= tolerance
    seeds: int = 1  # paired seeds trained at each proposed size
    max_seeds: int = 3  # seeds added while |Δ| is within noise
    max_rounds: int = 8  # bisection rounds per pair
    # two-sided false-sign rate of the one sign rule at a true Δ of 0 over all its looks (one
    # look per added seed up to max_seeds; Pocock-type α-spending, core/sequential.py)
    alpha: float = 0.05
    # a guess of the paired-Δ sd (nats), worth noise_prior_dof pseudo-observations: the seeds
    # outweigh it as they come in (core/noise.py); it is never taken as known
    noise_prior: float = 0.003
    noise_prior_dof: float = 0.25
    # Scan for a second sign change (dwtune.core.transitions): once a pair is bracketed, probe
    # every gap wider than scan_spacing e-folds of N within scan_reach e-folds of the bracket.
    # A dip of Δ narrower than the spacing can slip between probes; 0 turns the scan off.
    scan_spacing: float = 0.35
    scan_reach: float = 2.5
    # training-length robustness: factors on the training length at which each bracketed
    # pair's N* is re-estimated after the refine stage (dwtune.study.length_check); () = off
    length_check: tuple[float, ...] = ()
    # Where each pair's first points lie (core/design.py): "grid" trains every depth at every
    # space.budgets; "law" trains each pair's two depths at N*·e^(±reach) of fit.reference's
    # law (e-folds of N), widening beyond a censored edge (or, where no sign is decided, towards
    # the side the mean Δ leans to) inside space.budgets' range.
    design: str = Design.GRID.value
    reach: float = 0.35
    # Law design only (the grid design ignores it): the pairs, ranked by depth, refine in this
    # many waves one after another. The first wave's sizes come from fit.reference; each later
    # wave's from the law fitted on the waves before it (core/fit/censored.py: running_law),
    # so the first must hold 3 pairs. 1: every pair at once.
    waves: int = 1
    # Early decisions (dwtune.core.early_decision): stop a point's trainings once their partial
    # curves settle the end Δ's sign at refine.alpha, no earlier than early_min_fraction of the
    # steps; the point's sign is then the early rule's. Needs evals along the run (eval_every).
    early_stop: bool = False
    early_min_fraction: float = 0.3

    def __post_init__(self) -> None:
        one_of("refine.design", self.design, tuple(d.value for d in Design))
        positive("refine.reach", self.reach)
        at_most("refine.reach", self.reach, limits.MAX_SCAN_REACH)
        at_least("refine.waves", self.waves, 1)
        positive("refine.tolerance", self.tolerance)
        if not 0 < self.early_min_fraction < 1:
            raise InputError(
                f"refine.early_min_fraction: got {self.early_min_fraction!r}; expected a "
                f"fraction of the training steps in (0, 1), e.g. 0.3"
            )
        at_least("refine.scan_spacing", self.scan_spacing, 0)
        at_least("refine.scan_reach", self.scan_reach, 0)
        at_most("refine.scan_reach", self.scan_reach, limits.MAX_SCAN_REACH)
        if self.scan_spacing:  # bounds the probes per pair: reach / spacing on each side
            at_least("refine.scan_spacing", self.scan_spacing, self.scan_reach / limits.MAX_ROUNDS)
        at_least("refine.seeds", self.seeds, 1)
        at_least("refine.max_seeds", self.max_seeds, self.seeds)
        at_least("refine.max_rounds", self.max_rounds, 0)
        positive("refine.noise_prior", self.noise_prior)
        positive("refine.noise_prior_dof", self.noise_prior_dof)
        at_most("refine.noise_prior_dof", self.noise_prior_dof, limits.MAX_PRIOR_DOF)
        if not 0 < self.alpha < 0.5:
            raise InputError(f"refine.alpha: got {self.alpha}; expected a number in (0, 0.5)")
        at_most("refine.max_seeds", self.max_seeds, limits.MAX_REFINE_SEEDS)
        at_most("refine.max_rounds", self.max_rounds, limits.MAX_ROUNDS)
        at_most("refine.pairs (entries)", len(self.pairs), limits.MAX_PAIRS)
        for pair in self.pairs:
            if len(pair) != 2 or pair[0] >= pair[1]:
                raise InputError(
                    f"refine.pairs: got {list(pair)}; expected [shallower, deeper] depths"
                )
        checks.length_factors("refine.length_check", self.length_check)


@dataclass(frozen=True)
class FitConfig:
    budgets: tuple[float, ...] = (1.75e11, 1e12, 1e13)  # sizes to project the best shape for
    reference: str = "levine2020"  # published fit drawn beside the study's

    def __post_init__(self) -> None:
        one_of("fit.reference", self.reference, REFERENCE_FITS)
        at_most("fit.budgets (entries)", len(self.budgets), limits.MAX_FIT_BUDGETS)
        for budget in self.budgets:  # the same rules as space.budgets
            positive("fit.budgets", budget)
            at_most("fit.budgets", budget, limits.MAX_BUDGET)


@dataclass(frozen=True)
class ResourcesConfig:
    cpu: float = 1.0  # per trial
    gpu: float = 0.0  # per trial; fractions must divide 1 (0.5, 0.25, ...)
    max_concurrent: int | None = None  # None: as many as resources allow
    retries: int = 1  # re-runs of a failed trial before it is recorded as failed
    # Memory of one GPU (GiB) for packing checks; None: from `dwtune plan --device`.
    gpu_memory_gb: float | None = None
    # Data-parallel workers one trial may span (a Ray Train job, parameters sharded with
    # FSDP2); each worker holds `cpu` CPUs and `gpu` GPUs. On GPUs a cell is sharded only when
    # no micro-batch lets one GPU hold it (known gpu_memory_gb or `plan --device`), over the
    # fewest workers that hold it, each in the fewest micro-batches; on CPU, or with the GPU
    # memory unknown, every cell uses all of them.
    workers_per_trial: int = 1

    def __post_init__(self) -> None:
        positive("resources.cpu", self.cpu)
        at_least("resources.gpu", self.gpu, 0)
        at_least("resources.workers_per_trial", self.workers_per_trial, 1)
        at_most("resources.workers_per_trial", self.workers_per_trial, limits.MAX_CONCURRENT)
        if self.workers_per_trial > 1 and self.gpu not in (0, 1):
            raise InputError(
                f"resources.gpu: got {self.gpu:g} with workers_per_trial "
                f"{self.workers_per_trial}; a sharded trial's workers hold one whole GPU each: "
                f"use gpu 1 (or 0 on CPU)"
            )
        if 0 < self.gpu < 1 and not math.isclose(1 / self.gpu, round(1 / self.gpu)):
            raise InputError(
                f"resources.gpu: got {self.gpu}; fractions must divide 1 (0.5, 0.25, 0.125)"
            )
        if self.gpu > 1 and self.gpu != int(self.gpu):
            raise InputError(f"resources.gpu: got {self.gpu}; above 1 use whole GPUs")
        if self.max_concurrent is not None:
            at_least("resources.max_concurrent", self.max_concurrent, 1)
            at_most("resources.max_concurrent", self.max_concurrent, limits.MAX_CONCURRENT)
        at_least("resources.retries", self.retries, 0)
        at_most("resources.retries", self.retries, limits.MAX_RETRIES)
        at_most("resources.cpu", self.cpu, limits.MAX_CONCURRENT)
        at_most("resources.gpu", self.gpu, limits.MAX_CONCURRENT)
        if self.gpu_memory_gb is not None:
            positive("resources.gpu_memory_gb", self.gpu_memory_gb)


@dataclass(frozen=True)
class SimulatedConfig:
    """Planted law, noise and surface of the simulated backend (see dwtune.backends.simulated).

    The fields after ``seed_correlation`` shape the hard surfaces; each one enters a trial's
    identity only when it differs from its default (:meth:`identity`), so experiment
    directories made before they existed still resume.
    """

    a: float = 5.039  # planted ln dx* = a + b·L
    b: float = 0.0555
    noise: float = 0.002  # seed-to-seed standard deviation of the final loss (nats)
    seconds_per_step: float = 0.0  # optional sleep per reported step, to rehearse scheduling
    gap: float = 0.05  # largest loss gap (nats) one planted depth pair opens far from its N*
    transition_scale: float = 0.5  # e-folds of N over which a pair's gap changes sign
    seed_correlation: float = 0.5  # share of the noise variance a seed gives every depth
    surface: str = "default"  # one of SIMULATED_SURFACES
    # depth_noise: noise sd(L) = noise·(1 + noise_depth_slope·(L − 1)),
    # gap(L) = gap / (1 + gap_depth_slope·(L − 1)) for the pair whose deeper depth is L
    noise_depth_slope: float = 0.1
    gap_depth_slope: float = 0.1
    # size_noise: noise sd(N) = noise·exp(noise_size_slope·ln(N / 1e8)), per e-fold of N
    noise_size_slope: float = 0.15
    # non_monotone: a bump of depth dip_size·gap, dip_offset e-folds below ln N*, half-width
    # dip_width e-folds, pulls Δ below zero once before the real crossing
    dip_size: float = 1.5
    dip_offset: float = 2.0
    dip_width: float = 0.5
    # outliers: a share of the trainings of depth >= outlier_min_depth ends outlier_size nats high
    outlier_share: float = 0.03
    outlier_size: float = 0.1
    outlier_min_depth: int = 0
    # divergences: P = logistic(diverge_logit + diverge_depth_slope·L
    #                           + diverge_lr_slope·ln(lr / lr_opt))
    diverge_logit: float = -4.0
    diverge_depth_slope: float = 0.1
    diverge_lr_slope: float = 2.0
    # learning-rate penalty (any surface; lr_mistuned needs it > 0), nats:
    # lr_penalty·ln²(lr / lr_opt(w)),  lr_opt(w) = lr_opt·(lr_base_width / w)^lr_width_exponent
    lr_penalty: float = 0.0
    lr_opt: float = 3e-3
    lr_base_width: float = 256.0
    lr_width_exponent: float = 1.0
    # asymmetric: above N* the deeper net wins by at most asymmetry_gap_ratio·gap, approached
    # as a power law of exponent asymmetry_power in the e-folds past N*
    asymmetry_gap_ratio: float = 0.4
    asymmetry_power: float = 0.5
    # training length (any surface): every planted N* scales by
    # (total steps / length_ref_steps)^length_exponent; 0 = the length does not matter
    length_exponent: float = 0.0
    length_ref_steps: int = 1000
    # the validation curve (any surface): interpolated, or late_descent, where a net of depth L
    # descends along progress^(1 + curve_lag·ln L) (a deeper net later) and every eval before
    # the last adds independent noise of sd curve_eval_noise (nats)
    curve: str = "interpolated"
    curve_lag: float = 0.1
    curve_eval_noise: float = 0.001

    def __post_init__(self) -> None:
        for name in ("a", "b", "diverge_logit", "diverge_depth_slope", "diverge_lr_slope"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise InputError(f"simulated.{name}: got {value!r}; expected a finite number")
        self._check_maxima()
        for name in (
            "noise",
            "seconds_per_step",
            "gap",
            "noise_depth_slope",
            "gap_depth_slope",
            "noise_size_slope",
            "dip_size",
            "outlier_size",
            "outlier_min_depth",
            "lr_penalty",
            "lr_width_exponent",
            "curve_lag",
            "curve_eval_noise",
        ):
            at_least(f"simulated.{name}", getattr(self, name), 0)
        for name in (
            "transition_scale",
            "dip_offset",
            "dip_width",
            "lr_opt",
            "lr_base_width",
            "asymmetry_gap_ratio",
            "asymmetry_power",
        ):
            positive(f"simulated.{name}", getattr(self, name))
        at_least("simulated.length_ref_steps", self.length_ref_steps, 1)
        within("simulated.seed_correlation", self.seed_correlation, 0, 1)
        within("simulated.outlier_share", self.outlier_share, 0, 1)
        one_of("simulated.surface", self.surface, SIMULATED_SURFACES)
        one_of("simulated.curve", self.curve, SIMULATED_CURVES)
        self._check_surface()

    def _check_maxima(self) -> None:
        for name in (
            "a",
            "b",
            "noise",
            "gap",
            "transition_scale",
            "length_exponent",
            "curve_lag",
            "curve_eval_noise",
        ):
            value = getattr(self, name)
            within(f"simulated.{name}", value, -limits.MAX_SIMULATED_ABS, limits.MAX_SIMULATED_ABS)
        at_most("simulated.seconds_per_step", self.seconds_per_step, limits.MAX_SECONDS_PER_STEP)

    def _check_surface(self) -> None:
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
