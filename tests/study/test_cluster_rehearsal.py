"""The cluster rehearsal (benchmarks/cluster_rehearsal.py): a head and two worker nodes on this
machine, each with a private /tmp, one shared folder for storage; a driver killed and rerun, a
worker node killed under a sharded trial. Nothing lost, nothing trained twice, every
interrupted trial resumed from its checkpoint.

Skipped, with the script's one line, where the machine does not allow mount namespaces (the
script exits 77 there).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cluster_rehearsal.py"
EXIT_UNSUPPORTED = 77
TIMEOUT_S = 900  # the script's own limit (--timeout) is 840 s; this stops a hung one


def test_the_cluster_rehearsal_loses_nothing_and_trains_nothing_twice():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", "--timeout", "840"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if done.returncode == EXIT_UNSUPPORTED:
        pytest.skip(done.stdout.strip())
    assert done.stdout.lstrip().startswith("{"), done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["ok"], (result["failures"], done.stderr[-3000:])
    assert done.returncode == 0
    assert result["nodes"] == 3 and result["checks"]["private_tmp"]
    assert result["sharded_trials_across_nodes"] >= 1
    assert result["trials_lost"] == 0
    assert result["trials_run_twice"] == 0
    resumed = result["resumed_from_step"]
    assert len(resumed) == 2  # one trial after the driver kill, one after the node kill
    assert all(step > 0 for step in resumed.values()), resumed
