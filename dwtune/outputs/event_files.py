"""TensorBoard event files written in the caller's thread.

tensorboardX's ``SummaryWriter`` hands every event to a writer thread of its own. When the disk
fills, that thread dies with an ``OSError`` traceback on stderr that nobody can catch, its
bounded queue then blocks the next ``add_scalar`` for ever, and an ``atexit`` hook prints one
more traceback as the process ends. :class:`EventFile` writes the same records (tensorboardX's
``EventsWriter``, the file format TensorBoard reads) synchronously, so a full disk or an
unwritable folder is an ordinary ``OSError`` where the event is added, which the caller turns
into one line.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from tensorboardX.event_file_writer import EventsWriter
from tensorboardX.proto import event_pb2
from tensorboardX.summary import scalar, text

EVENTS_PREFIX = "events"  # files are named events.out.tfevents.<time>.<host>, as tensorboardX's


class EventFile:
    """One event file in ``logdir``: ``add_scalar``, ``add_text``, ``add_summary``, ``close``."""

    def __init__(self, logdir: Path):
        Path(logdir).mkdir(parents=True, exist_ok=True)
        self._events: EventsWriter | None = EventsWriter(str(Path(logdir) / EVENTS_PREFIX))

    def add_summary(self, summary, global_step: int | None = None) -> None:
        event = event_pb2.Event(summary=summary, wall_time=time.time())
        if global_step is not None:
            event.step = int(global_step)
        if self._events is not None:
            self._events.write_event(event)

    def add_scalar(self, tag: str, value: float, global_step: int | None = None) -> None:
        self.add_summary(scalar(tag, value), global_step)

    def add_text(self, tag: str, text_string: str, global_step: int | None = None) -> None:
        self.add_summary(text(tag, text_string), global_step)

    def flush(self) -> None:
        if self._events is not None:
            self._events.flush()

    def close(self) -> None:
        """Flush and close; a second call does nothing."""
        events, self._events = self._events, None
        if events is not None:
            events.close()

    def discard(self) -> None:
        """Close without raising: for a run that is already stopping on a write error (the
        file closes even when its last flush fails)."""
        with contextlib.suppress(OSError):
            self.close()

    def __enter__(self) -> EventFile:
        return self

    def __exit__(self, *exc_info) -> None:
        if exc_info[0] is None:
            self.close()
        else:
            self.discard()
