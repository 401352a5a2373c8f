"""The errors Ray's raylet publishes to the driver, kept to one short line each.

Ray's driver prints every error the cluster publishes (``ray._private.worker.
listen_error_messages``) to stdout, whatever ``log_to_driver`` says. A killed trial worker
publishes "A worker died or was killed while executing a task ..." with its ids, addresses and
a list of possible causes: one line of about 1,100 characters, printed beside dwtune's own line
for the same event ("attempt N failed (its worker process died ...)"). That one is dropped;
any other published error is printed as its first line, cut to ``MAX_CHARS``.
"""

from __future__ import annotations

import functools

from ray._private import worker as ray_worker

WORKER_DIED = "A worker died or was killed while executing"
MAX_CHARS = 200


def short_lines(lines: list[str]) -> list[str]:
    """What of a published error reaches the console: nothing of a worker's death (dwtune's
    trial line says it), else its first line, cut."""
    text = " ".join(line.strip() for line in lines if line.strip())
    if not text or WORKER_DIED in text:
        return []
    first = lines[0].strip() if lines[0].strip() else text
    return [first if len(first) <= MAX_CHARS else f"{first[: MAX_CHARS - 1]}…"]


def install() -> None:
    """Route the driver's published-error printer through :func:`short_lines` (once)."""
    original = ray_worker.print_to_stdstream
    if getattr(original, "_dwtune_short", False):
        return

    @functools.wraps(original)
    def print_short(data: dict[str, object], ignore_prefix: bool) -> None:
        if data.get("pid") != "raylet":  # a worker's own output (log_to_driver): as it is
            original(data, ignore_prefix)
            return
        published = data.get("lines")
        texts = [str(line) for line in published] if isinstance(published, list) else []
        lines = short_lines(texts)
        if lines:
            original({**data, "lines": lines}, ignore_prefix)

    print_short._dwtune_short = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = print_short
