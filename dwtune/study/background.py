"""Writes the study does not wait for, done in order on one thread of their own.

The driver's Tune event loop also records every trial and advances its pair, and each trial
waits for the driver at every report. Some of what the driver writes is read by no decision and
by nothing later in the run: a trial's TensorBoard events (the live view, then the run
rewritten from its record), a checkpoint that is no longer a trial's latest, a pair's
provisional N* in its Optuna journal and on its decisions board. Each of these costs an fsync
or a directory walk (milliseconds), and a refine stage makes thousands. :class:`Background`
runs them on one worker thread, first in first out, so the event loop goes back to the trials
at once; the file calls release the GIL, so the two threads really overlap.

What must be safe before anything else (a trial's record, a pair's told point) is never handed
over: it is written in the caller's thread, as before.

A write that fails (a full disk: an :class:`~dwtune.core.errors.InputError` from
:func:`~dwtune.storage.store.writing`) stops the later writes and is raised in the caller's
thread at its next :meth:`Background.submit` or :meth:`Background.drain`, so the run stops with
the same one line as when the write was the caller's.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

Write = Callable[[], None]
_STOP = None  # what close puts on the queue: the worker ends


class Background:
    """One worker thread that runs submitted writes in the order they came."""

    def __init__(self, name: str = "dwtune-writes"):
        self._queue: queue.Queue[Write | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, write: Write) -> None:
        """Queue ``write``; first raise the failure of an earlier one, if any."""
        self._raise_failure()
        self._queue.put(write)

    def drain(self) -> None:
        """Wait until every write submitted so far is done; raise the first that failed."""
        self._queue.join()
        self._raise_failure()

    def close(self) -> None:
        """Drain, then end the worker (raising a failed write's error, once drained)."""
        try:
            self.drain()
        finally:
            self._queue.put(_STOP)
            self._thread.join()

    def _raise_failure(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _work(self) -> None:
        failed = False
        while True:
            write = self._queue.get()
            try:
                if write is _STOP:
                    return
                if not failed:  # after a failure the run is stopping: nothing more is written
                    write()
            except Exception as exc:  # handed to the caller's thread (module doc)
                failed = True
                self._error = exc
            finally:
                self._queue.task_done()
