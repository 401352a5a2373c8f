"""User-facing errors.

Anything a user can fix (a spec, a path, a flag, a file) raises :class:`InputError`. The CLI
prints its message as one line and exits with code 2; no traceback. Messages name the field or
file, the offending value and what would be accepted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

# Characters of an echoed value: enough to recognise it; a 10 MB cell is not echoed whole.
SHOWN_CHARS = 60


class InputError(Exception):
    """Bad input that the user can fix; the message is one line naming problem and fix."""


class InputErrors(InputError):
    """Several problems of one input found in one pass (a spec with three bad keys): each one
    line; the CLI prints one line each. ``errors`` holds them in the order found."""

    def __init__(self, errors: list[InputError]):
        self.errors = [one for error in errors for one in _flat(error)]
        super().__init__("\n".join(str(error) for error in self.errors))


def _flat(error: InputError) -> list[InputError]:
    return error.errors if isinstance(error, InputErrors) else [error]


class ErrorCollector:
    """Gathers the InputErrors of independent checks, to raise them together at the end.

    ``collector.attempt(check, *args)`` returns ``check(*args)``, or None after recording its
    InputError; :meth:`raise_any` raises the one error, or all of them as :class:`InputErrors`.
    """

    def __init__(self) -> None:
        self.errors: list[InputError] = []

    def add(self, error: InputError) -> None:
        self.errors.extend(_flat(error))

    def attempt(self, check: Callable[..., T], *args: object) -> T | None:
        try:
            return check(*args)
        except InputError as error:
            self.add(error)
            return None

    def raise_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise InputErrors(list(self.errors))


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters with its length said."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def field_error(field: str, value: object, expected: str) -> InputError:
    """Build the canonical 'field: got X; expected Y' message."""
    return InputError(f"{field}: got {shown(value)}; expected {expected}")


@contextlib.contextmanager
def numeric_input(source: str, fix: str) -> Iterator[None]:
    """Numbers in ``source`` that a fit or a projection cannot use (tiny errors, extreme or
    NaN coefficients) become one InputError line instead of a solver's traceback.
    numpy's LinAlgError is a ValueError; overflow and division errors are ArithmeticErrors.
    numpy's overflow, division and invalid-value warnings are raised as FloatingPointError
    inside the block, so they end in that one line instead of spilling RuntimeWarnings (and,
    from the non-finite numbers they let through, LAPACK's own lines) before it."""
    import numpy as np  # not at module level: every command imports this module

    try:
        with np.errstate(over="raise", divide="raise", invalid="raise"):
            yield
    except (ArithmeticError, ValueError) as exc:
        detail = (str(exc).splitlines() or [""])[0][:200]
        raise InputError(
            f"{source}: its numbers cannot be used ({type(exc).__name__}: {detail}); {fix}"
        ) from None
