"""Upper bounds on every count and size a spec (or an input file) may ask for (pure).

Each is checked at parse time, before any work starts, with one line naming the field, the
value and the maximum (``checks.at_most``). They are far above any study this tool is meant
for (the paper's largest model is 175B parameters at depth 96), and low enough that a typo
(``num: 1e9``, ``mlp_ratio: 1e308``) fails in milliseconds instead of hanging or exhausting
memory. docs/limits.md lists them; change them here only.
"""

from __future__ import annotations

# --- counts: how much work a spec asks for
MAX_DEPTH = 1024  # layers of one model
MAX_DEPTHS = 64  # entries of space.depths
MAX_BUDGETS = 256  # entries of space.budgets (or its num)
MAX_SEEDS = 1000  # space.seeds as a count or list length
MAX_SEED = 2**31 - 1  # seeds are 0 <= seed <= this (torch and numpy take 32-bit seeds)
MAX_GRID_TRIALS = 100_000  # depths x budgets x seeds
MAX_PAIRS = 64  # refine.pairs
MAX_REFINE_SEEDS = 100  # refine.seeds and refine.max_seeds
MAX_SCAN_REACH = 20.0  # refine.scan_reach, e-folds of N (a factor of 5e8 each side)
MAX_ROUNDS = 64  # refine.max_rounds: bisection halves the bracket each round
MAX_LENGTH_FACTORS = 4  # refine.length_check: each factor retrains every checked point
MAX_LENGTH_FACTOR = 100.0  # refine.length_check: factors within [1/this, this]
MAX_FIT_BUDGETS = 64  # fit.budgets
MAX_RETRIES = 100  # resources.retries
MAX_CONCURRENT = 100_000  # resources.max_concurrent
MAX_STEPS = 10**9  # train.steps (and every step count: warmup, eval_every, patience)
MAX_TOKENS = 10**15  # train.tokens
MAX_EVAL_BATCHES = 100_000  # train.eval_batches

# --- sizes: how large one model or batch may be
MAX_BUDGET = 1e15  # parameters of one model (space.budgets, fit.budgets)
MAX_WIDTH = 2**20  # model width (projections, --width)
MAX_HEADS = 4096  # model.heads
MAX_WIDTH_MULTIPLE = 4096  # model.width_multiple
MAX_MLP_RATIO = 64.0  # model.mlp_ratio
MAX_VOCAB = 2**22  # data.vocab_size (4M rows)
MAX_SEQ_LEN = 2**20  # data.seq_len (tokens)
MAX_BATCH_SIZE = 2**20  # train.batch_size (sequences)
MAX_LR = 100.0  # train.lr
MAX_SECONDS_PER_STEP = 60.0  # simulated.seconds_per_step
MAX_PRIOR_DOF = 1e3  # refine.noise_prior_dof: a guess worth more than this is a known value
MAX_SIMULATED_ABS = 1e3  # |simulated.a|, |b|, gap, noise, transition_scale

# --- files
MAX_NESTING = 32  # nested lists/mappings in a spec, record, journal line or fit.json
MAX_SPEC_BYTES = 1 * 2**20  # a spec file (YAML)
# values in a spec once its YAML aliases are expanded: a 400-byte alias bomb names 10^9
MAX_SPEC_VALUES = 100_000
MAX_JSON_BYTES = 64 * 2**20  # one trial record, fit.json or other dwtune JSON file
