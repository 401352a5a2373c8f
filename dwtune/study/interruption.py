"""Ctrl-C during a study, made certain to stop it.

Python turns SIGINT into a KeyboardInterrupt wherever the main thread happens to be, and
inside Ray and Ray Tune some of those places catch it, defer it or let the study run on; a
study could then finish and the command exit 0 although the user interrupted it. So a study
command notes the signal itself (:func:`catching_ctrl_c`), the Tune callback raises it again
at the next step of Tune's loop (:func:`raise_if_interrupted`), and the command reports an
interruption whenever one was noted (:func:`interrupted`), however the study ended.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_received = threading.Event()


def _on_sigint(signum, frame) -> None:
    _received.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def catching_ctrl_c() -> Iterator[None]:
    """Within the block, SIGINT is noted and raised as KeyboardInterrupt (main thread only:
    Python lets no other thread set a handler). A SIGINT the process was started ignoring (a
    shell's background job, nohup) stays ignored: Ctrl-C in that terminal is not meant for it."""
    _received.clear()
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupted() -> bool:
    """Whether a SIGINT arrived in the last :func:`catching_ctrl_c` block."""
    return _received.is_set()


def raise_if_interrupted() -> None:
    """KeyboardInterrupt again if a SIGINT arrived and something swallowed the first one."""
    if _received.is_set():
        raise KeyboardInterrupt
