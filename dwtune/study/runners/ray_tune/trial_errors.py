"""A failed trial's error, as one line, read from Ray Tune's text error file only.

Tune writes each error twice beside the trial: ``error.pkl`` (a pickle) and ``error.txt`` (the
traceback as text). dwtune never unpickles anything from the storage folder: anyone who can
write there could run code in the driver. The text file's last line is the trainer's exception
(``Type: message``); a RayTaskError's text ends with its cause.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

ERROR_CHARS = 2000  # characters of a failed trial's error kept in its record
NO_ERROR_TEXT = "unknown error (no error file from Ray Tune)"
# Bytes read from the end of the error file: the last line is what matters, and a hostile
# file must not make the driver read gigabytes.
TAIL_BYTES = 64 * 1024
# Errors of a trial that are the disk's, not the trial's: such a trial is not recorded as
# failed (a rerun after freeing space trains it), the run stops with one line instead.
OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
ERRNO_IN_TEXT = re.compile(r"\[errno (\d+)\]", re.IGNORECASE)  # OSError's and pyarrow's form


def _tail(path: Path) -> str:
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - TAIL_BYTES))
        return handle.read().decode(errors="replace")


def _error_file_text(trial) -> str:
    """The driver's copy of ``error.txt`` (written first), else Tune's copy in storage."""
    local_text = trial.error_file
    try:
        if local_text and Path(local_text).is_file():
            return _tail(Path(local_text))
    except OSError:
        pass
    stored = trial.get_error()  # a TuneError built from the text file, never a pickle
    return str(stored) if stored is not None else ""


def one_line(text: str) -> str:
    """The last non-empty line of an error text, whitespace squeezed, bounded."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else NO_ERROR_TEXT
    return " ".join(line.split())[:ERROR_CHARS]


# Ray's explanation of a dead trial process runs to about 1,000 characters of possible causes;
# these words say it first, so a console line cut to its start still says what happened.
WORKER_DIED = "its worker process died: killed by a signal or out of memory, or it crashed"
WORKER_DIED_MARKS = ("worker process has died", "The actor died unexpectedly")
CONSOLE_CHARS = 200  # of an error on a progress line; the record keeps ERROR_CHARS


def error_text(trial) -> str:
    """One line: the exception type and message that failed the trial's last attempt."""
    line = one_line(_error_file_text(trial))
    if any(mark in line for mark in WORKER_DIED_MARKS):
        return one_line(f"{WORKER_DIED}; Ray: {line}")
    return line


def console_text(line: str) -> str:
    """An error line for the console: a dead worker in those words alone, else cut."""
    if line.startswith(WORKER_DIED):
        return WORKER_DIED
    return line if len(line) <= CONSOLE_CHARS else f"{line[:CONSOLE_CHARS]}…"


def out_of_space(line: str) -> int | None:
    """The errno of a full disk or quota named in a trial's error line, else None."""
    for match in ERRNO_IN_TEXT.finditer(line):
        if int(match.group(1)) in OUT_OF_SPACE:
            return int(match.group(1))
    return None


def forget_pickled_error(trial) -> None:
    """Drop Tune's ``error.pkl`` of ``trial`` and its note of it, so that nothing (Tune's own
    ResultGrid included, which unpickles it when ``fit`` returns) ever loads it."""
    path = trial.pickled_error_file
    trial.run_metadata.pickled_error_filename = None
    if path:
        Path(path).unlink(missing_ok=True)
