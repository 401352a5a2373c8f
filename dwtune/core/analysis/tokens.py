"""Are a point's runs compared at equal training tokens? (pure: numpy)

Why: Δ of two runs trained for different numbers of tokens mixes the depth effect with the
training-length effect (a loss falling as tokens^-0.095, Kaplan et al. 2020's data exponent,
ends 0.095·ln 1.25·3 ≈ 0.06 nats lower at 3 nats after 25% more tokens: more than a planted
gap of 0.05), and the last-checkpoint rule picks whatever each run reached. So every point's runs
are held against each other: where their tokens (steps, in a table without tokens) at the
checkpoints compared differ by more than a factor ``1 + TOKEN_TOLERANCE``, the pair gets one
warning naming the two runs of its worst point, their tokens and the factor. With
``--tokens T`` the checkpoint nearest T is used; runs whose nearest checkpoint is still more
than that factor from T are counted in one more warning. Nothing is dropped or corrected:
the warning says what the comparison mixes and how to avoid it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dwtune.core.analysis.matching import MatchedPoint
from dwtune.core.analysis.table import RunTable, run_name

# A factor 1.02 in tokens moves such a loss by 0.095·ln 1.02·3 ≈ 0.006 nats, two to three
# times the median checkpoint jitter of a real suite (0.0023 nats): a gap worth a line.
TOKEN_TOLERANCE = 0.02


@dataclass(frozen=True)
class TokenGap:
    """The worst point of a pair whose runs differ in training length, and how many do."""

    pair: str
    run_a: str  # the run with fewer tokens
    tokens_a: float
    run_b: str
    tokens_b: float
    points: int  # points of the pair whose runs differ beyond the tolerance
    order: str  # "tokens" or "step"

    @property
    def factor(self) -> float:
        return self.tokens_b / self.tokens_a

    def describe(self, rule: str) -> str:
        """One line; ``rule``: "last" or "nearest" (how the checkpoints were picked)."""
        unit = "tokens" if self.order == "tokens" else "steps"
        where = "last checkpoints" if rule == "last" else "checkpoints nearest the --tokens asked"
        more = f" ({self.points - 1} more point(s) of the pair too)" if self.points > 1 else ""
        fix = (
            "pass --tokens T to compare at equal tokens"
            if rule == "last" and self.order == "tokens"
            else "Δ mixes depth with training length"
        )
        return (
            f"pair {self.pair}: runs {self.run_b} ({self.tokens_b:.3g} {unit}) and {self.run_a} "
            f"({self.tokens_a:.3g}) differ by {self.factor - 1:.0%} (a factor "
            f"{self.factor:.3g}) in {unit} at their {where}{more}; {fix}"
        )


def _ordering(table: RunTable) -> tuple[str, np.ndarray | None]:
    if table.tokens is not None:
        return "tokens", table.tokens
    return ("step", table.step) if table.step is not None else ("", None)


def pair_token_gap(
    label: str,
    matched: Sequence[MatchedPoint],
    used: RunTable,
    tolerance: float = TOKEN_TOLERANCE,
) -> TokenGap | None:
    """The pair's token warning (module doc); None where every point's runs agree (or the
    table records neither tokens nor steps). ``used``: the table of used checkpoints."""
    order_name, order = _ordering(used)
    if order is None:
        return None
    index = {int(r): i for i, r in enumerate(used.row)}
    worst, count = None, 0
    for m in matched:
        rows = [index[r] for r in (*m.rows_deep, *m.rows_shallow) if r in index]
        values = order[rows]
        low, high = rows[int(np.argmin(values))], rows[int(np.argmax(values))]
        if not order[low] > 0 or order[high] <= order[low] * (1 + tolerance):
            continue
        count += 1
        if worst is None or order[high] / order[low] > order[worst[1]] / order[worst[0]]:
            worst = (low, high)
    if worst is None:
        return None
    low, high = worst
    names = run_name(used, low), run_name(used, high)
    return TokenGap(label, names[0], float(order[low]), names[1], float(order[high]), count,
                    order_name)  # fmt: skip


@dataclass(frozen=True)
class TargetMiss:
    """Runs whose checkpoint nearest ``--tokens`` is more than the tolerance away from it."""

    target: float
    runs: int
    worst_run: str
    worst_tokens: float

    def describe(self) -> str:
        factor = max(self.worst_tokens / self.target, self.target / self.worst_tokens)
        return (
            f"--tokens {self.target:.3g}: {self.runs} run(s) have no checkpoint within "
            f"{TOKEN_TOLERANCE:.0%} of it; farthest: {self.worst_run} at {self.worst_tokens:.3g} "
            f"tokens (a factor {factor:.3g})"
        )


def target_misses(
    used: RunTable, target: float | None, tolerance: float = TOKEN_TOLERANCE
) -> TargetMiss | None:
    """The ``--tokens`` warning (module doc); None without a target or where all runs hit it."""
    if target is None or used.tokens is None:
        return None
    tokens = np.asarray(used.tokens, dtype=float)
    distance = np.abs(np.log(np.maximum(tokens, 1e-300) / target))
    off = np.flatnonzero(distance > np.log1p(tolerance))
    if off.size == 0:
        return None
    worst = int(off[np.argmax(distance[off])])
    return TargetMiss(target, int(off.size), run_name(used, worst), float(tokens[worst]))
