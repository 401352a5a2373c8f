"""One small frozen dataclass per concern of a study spec; each validates itself on creation."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dwtune.core.budget import SIZE_CONVENTIONS
from dwtune.core.errors import InputError
from dwtune.core.spec import limits
from dwtune.core.spec.checks import at_least, at_most, finite, one_of, positive, within

TOKENIZERS = ("char", "bpe")
SCHEDULES = ("cosine", "linear", "constant")
TRAINERS = ("torch", "simulated")
BUILTIN_CORPORA = ("shakespeare",)
REFERENCE_FITS = ("levine2020",)  # dwtune.core.projection holds their constants


@dataclass(frozen=True)
class DataConfig:
    corpus: str = "shakespeare"  # built-in name, a .txt file, a folder of .txt, or a .parquet
    text_column: str = "text"  # for Parquet corpora
    tokenizer: str = "char"
    # Embedding rows. For `char` an upper bound on distinct characters (rows past them stay
    # unused), so that plans know the exact parameter count without reading the corpus.
    vocab_size: int = 128
    seq_len: int = 128
    val_fraction: float = 0.1
    cache_dir: str = "~/.cache/dwtune"

    def __post_init__(self) -> None:
        one_of("data.tokenizer", self.tokenizer, TOKENIZERS)
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
    size_convention: str = "non_embedding"  # 12·L·dx² as in the paper, or "total" exact count

    def __post_init__(self) -> None:
        at_least("model.heads", self.heads, 1)
        at_least("model.width_multiple", self.width_multiple, 1)
        positive("model.mlp_ratio", self.mlp_ratio)
        at_most("model.heads", self.heads, limits.MAX_HEADS)
        at_most("model.width_multiple", self.width_multiple, limits.MAX_WIDTH_MULTIPLE)
        at_most("model.mlp_ratio", self.mlp_ratio, limits.MAX_MLP_RATIO)
        one_of("model.size_convention", self.size_convention, SIZE_CONVENTIONS)


@dataclass(frozen=True)
class SpaceConfig:
    depths: tuple[int, ...]
    budgets: tuple[float, ...]  # a list, or {min, max, num} log-spaced
    seeds: tuple[int, ...] = (0,)  # a list of seeds, or a count n meaning 0..n-1

    def __post_init__(self) -> None:
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
class TrainConfig:
    steps: int | None = None  # give steps or tokens (tokens / (batch_size·seq_len) steps)
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

    def __post_init__(self) -> None:
        if (self.steps is None) == (self.tokens is None):
            raise InputError("train: got both or neither of steps and tokens; give exactly one")
        at_least(
            "train.steps" if self.steps is not None else "train.tokens",
            self.steps if self.steps is not None else self.tokens,
            1,
        )
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
        one_of("train.compile", self.compile, ("auto", "true", "false"))
        one_of("train.device", self.device, ("auto", "cpu", "cuda"))
        if self.patience is not None:
            at_least("train.patience", self.patience, 1)

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
        return max(1, self.tokens // (self.batch_size * seq_len))


@dataclass(frozen=True)
class RefineConfig:
    pairs: tuple[tuple[int, int], ...] = ()  # (shallower, deeper) depth pairs
    tolerance: float = 0.1  # stop once N_high / N_low - 1 <= tolerance
    seeds: int = 1  # paired seeds trained at each proposed size
    max_seeds: int = 3  # seeds added while |Δ| is within noise
    max_rounds: int = 8  # bisection rounds per pair
    noise_z: float = 2.0  # |mean Δ| must exceed noise_z standard errors to decide its sign

    def __post_init__(self) -> None:
        positive("refine.tolerance", self.tolerance)
        at_least("refine.seeds", self.seeds, 1)
        at_least("refine.max_seeds", self.max_seeds, self.seeds)
        at_least("refine.max_rounds", self.max_rounds, 0)
        positive("refine.noise_z", self.noise_z)
        at_most("refine.max_seeds", self.max_seeds, limits.MAX_REFINE_SEEDS)
        at_most("refine.max_rounds", self.max_rounds, limits.MAX_ROUNDS)
        at_most("refine.pairs (entries)", len(self.pairs), limits.MAX_PAIRS)
        for pair in self.pairs:
            if len(pair) != 2 or pair[0] >= pair[1]:
                raise InputError(
                    f"refine.pairs: got {list(pair)}; expected [shallower, deeper] depths"
                )


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

    def __post_init__(self) -> None:
        positive("resources.cpu", self.cpu)
        at_least("resources.gpu", self.gpu, 0)
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


@dataclass(frozen=True)
class SimulatedConfig:
    """Planted law and noise of the simulated backend (see dwtune.backends.simulated)."""

    a: float = 5.039  # planted ln dx* = a + b·L
    b: float = 0.0555
    noise: float = 0.002  # seed-to-seed standard deviation of the final loss (nats)
    seconds_per_step: float = 0.0  # optional sleep per reported step, to rehearse scheduling
    gap: float = 0.05  # largest loss gap (nats) one planted depth pair opens far from its N*
    transition_scale: float = 0.5  # e-folds of N over which a pair's gap changes sign
    seed_correlation: float = 0.5  # share of the noise variance a seed gives every depth

    def __post_init__(self) -> None:
        for name in ("a", "b", "noise", "gap", "transition_scale"):
            value = getattr(self, name)
            within(f"simulated.{name}", value, -limits.MAX_SIMULATED_ABS, limits.MAX_SIMULATED_ABS)
        at_most("simulated.seconds_per_step", self.seconds_per_step, limits.MAX_SECONDS_PER_STEP)
        at_least("simulated.noise", self.noise, 0)
        at_least("simulated.seconds_per_step", self.seconds_per_step, 0)
        at_least("simulated.gap", self.gap, 0)
        positive("simulated.transition_scale", self.transition_scale)
        if not 0 <= self.seed_correlation <= 1:
            raise InputError(
                f"simulated.seed_correlation: got {self.seed_correlation!r}; expected 0 <= x <= 1"
            )
