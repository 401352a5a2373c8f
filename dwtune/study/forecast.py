"""The refine stage's forecast for the ETA, computed in a child process of the driver.

The forecast is the simulated twin's refine stage (:func:`~dwtune.study.cost_estimate.
refine_estimate`): pure Python, seconds to minutes of CPU. On a thread of the driver it held
the GIL that the driver's Tune event loop needs to start trials, so on two cores a refine stage
started no trial for minutes. A child process shares no GIL; it runs niced, so the trials keep
the CPU, and it ends with the study:

* the driver sends the spec (pickled, length first) on the child's stdin and keeps the pipe
  open; the child ends itself when it reads end-of-file there, so a driver that dies (even by
  SIGKILL) takes its forecast with it;
* the child prints each pair's refine trainings and their summed cost
  (:func:`~dwtune.core.cost.relative_trial_cost` on the spec's own trainer) as one JSON object
  and exits; a thread of the driver reads it and hands it to the display;
* :meth:`RefineForecast.stop` (the study ends first) kills the child.

A forecast that fails or never arrives changes nothing but the ETA: the display falls back to
counting rounds.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Callable

NICENESS = 10  # below the trials, which the forecast must not slow
_LENGTH = struct.Struct("!Q")

# pair label -> (refine trainings, their summed relative cost)
Forecast = dict[str, tuple[int, float]]


class RefineForecast:
    """A child process computing the spec's refine forecast; ``deliver`` gets it."""

    def __init__(self, spec: object, deliver: Callable[[Forecast], None]):
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd="/",  # the driver's working directory may be removed under it
            start_new_session=True,  # a Ctrl-C reaches the driver, which stops this
        )
        payload = pickle.dumps(spec)
        threading.Thread(
            target=self._await, args=(payload, deliver), name="dwtune-forecast", daemon=True
        ).start()

    def _await(self, payload: bytes, deliver: Callable[[Forecast], None]) -> None:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(_LENGTH.pack(len(payload)) + payload)
            stdin.flush()  # and kept open: its end-of-file tells the child to stop
            answer = stdout.read()
        except (OSError, ValueError):  # stopped meanwhile
            return
        if self._process.wait() != 0:
            return
        with contextlib.suppress(ValueError):
            deliver(
                {
                    str(pair): (int(count), float(cost))
                    for pair, (count, cost) in json.loads(answer).items()
                }
            )

    def stop(self) -> None:
        """End the child now (a finished one is left as it is)."""
        if self._process.poll() is None:
            with contextlib.suppress(OSError):
                self._process.kill()
        self._process.wait()
        with contextlib.suppress(OSError):
            if self._process.stdin is not None:
                self._process.stdin.close()


def _exit_when_the_driver_is_gone(fd: int) -> None:
    """Block until the driver closes our stdin (it stopped us, or died), then exit."""
    with contextlib.suppress(OSError):
        while os.read(fd, 65536):
            pass
    os._exit(1)


def _main() -> None:
    os.nice(NICENESS)
    stdin = sys.stdin.fileno()
    (length,) = _LENGTH.unpack(_read_exactly(stdin, _LENGTH.size))
    spec = pickle.loads(_read_exactly(stdin, length))
    threading.Thread(target=_exit_when_the_driver_is_gone, args=(stdin,), daemon=True).start()
    # after the spec: start-up is quick
    from dwtune.core.cost import relative_trial_cost
    from dwtune.study.cost_estimate import refine_estimate

    forecast: dict[str, list[float]] = {}
    for batch in refine_estimate(spec).rounds:
        for request in batch:
            count_cost = forecast.setdefault(str(request.pair), [0, 0.0])
            count_cost[0] += 1
            count_cost[1] += relative_trial_cost(spec.trainer, request.shape)
    sys.stdout.write(json.dumps(forecast))
    sys.stdout.flush()
    os._exit(0)  # not a normal shutdown: the watching thread is blocked reading stdin


def _read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes from ``fd`` (unbuffered: the watching thread reads it next)."""
    chunks, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:  # the driver is gone before it sent the spec
            os._exit(1)
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


if __name__ == "__main__":
    _main()
