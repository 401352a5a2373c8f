"""User-facing errors.

Anything a user can fix (a spec, a path, a flag, a file) raises :class:`InputError`. The CLI
prints its message as one line and exits with code 2; no traceback. Messages name the field or
file, the offending value and what would be accepted.
"""


class InputError(Exception):
    """Bad input that the user can fix; the message is one line naming problem and fix."""


def field_error(field: str, value: object, expected: str) -> InputError:
    """Build the canonical 'field: got X; expected Y' message."""
    return InputError(f"{field}: got {value!r}; expected {expected}")
