"""A rehearsal of a Ray cluster on one machine: private disks, shared storage, kills.

    python benchmarks/cluster_rehearsal.py [--json] [--keep] [--shared-dir DIR]

Starts a Ray head and two worker nodes on this machine, each a ``ray start --block`` process
in its own mount namespace with its own tmpfs ``/tmp`` (``unshare -m``): like separate
machines, no node sees another's session folder, trial folders or scratch. One folder outside
``/tmp`` stands for the network file system every node mounts: the experiment storage
(``--storage``), the token cache (``data.cache_dir``) and the corpus. Token authentication is
on (``RAY_AUTH_MODE=token``, a fresh random ``RAY_AUTH_TOKEN`` for every node and the driver).

Each node offers 1 CPU and each of a trial's 2 gloo workers asks for 0.6, so no node holds both
workers of a job: every sharded trial spans two nodes, and after one worker node is lost the
other two still hold a retried job (the trial's own 0.01-CPU Tune function fits beside a
worker, which it would not at 1 CPU a worker). Trials run one at a time
(``resources.max_concurrent: 1``).

The study (2 sharded trials, ``dwtune run --grid-only --address``, 200 steps, a checkpoint
every 40) is driven twice:

1. the driver (``dwtune run`` in the head's mount namespace, where a driver on a real cluster
   runs: Ray's driver reaches its node's raylet through a socket under that node's ``/tmp``)
   starts the first trial; once it has checkpointed, the worker node that holds one of its Ray
   Train workers is SIGKILLed (its ``ray start`` process group and every process below it:
   raylet, workers), and Tune retries the trial (``resources.retries``) on the two nodes left,
   which must resume from its checkpoint. Once that trial is recorded and the second has
   checkpointed, the driver is SIGKILLed, process group and all;
2. the same command again: the recorded trial must not train again, the interrupted one must
   resume from its checkpoint and finish.

What it watches, from outside, without joining the cluster: the process tree under each node's
``ray start`` (which node runs each ``ray::RayTrainWorker``, and the Ray Train run it belongs
to, from its working directory), every Ray Train checkpoint snapshot
(``checkpoint_manager_snapshot.json``: the step of the latest checkpoint) on the shared storage
and in each node's private ``/tmp`` (through ``/proc/<pid>/root``), the records, and the
drivers' output. It prints one JSON object (``--json``) or a short summary, and exits 0 only
when: some sharded trial ran across nodes, every requested trial is recorded finished, none
trained twice (a recorded trial again, or a checkpointed one from step 0), and every resumed
trial resumed from a step > 0. A trial recorded failed, or an attempt that fails where no kill
explains it, stops the rehearsal at once, with the exception lines found in the nodes' Ray logs
(``node_errors``). Exit 77: this machine does not allow mount namespaces.

Measured figures and the command that produced them: benchmarks/README.md, "Cluster
rehearsal"; what it stands for on a real cluster: docs/cluster.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import yaml

EXIT_UNSUPPORTED = 77
RAY = str(Path(sys.executable).with_name("ray"))
BANNER = "Ray runtime started"
NODE_START_S = 120  # s per node, on a loaded 2-core machine
POLL_S = 0.5  # s between looks; each look reads /proc (the script's own CPU)
TRAIN_WORKER = "ray::RayTrainWorker"  # Ray's process title of a Ray Train worker
TUNE_TRIAL = "ray::ImplicitFunc"  # and of a Tune function trial
SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray Train: the latest checkpoint's metrics
NAME = "rehearsal"
STEPS, EVAL_EVERY = 200, 40  # a checkpoint every 40 steps: kills land between checkpoints
WORKER_CPU = 0.6  # > 1/2 of a node's 1 CPU: no node holds both workers of a job
# Node loss is noticed in ~3 s instead of Ray's default ~30 s (GCS health checks of raylets).
HEAD_ENV = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}
# the corpus: lines of these words in a fixed random order (28 distinct characters)
WORDS = (
    "the depth width of a net attention layer wins loses when budget grows small large "
    "deeper wider model token train step loss shard node driver resume checkpoint"
)


# --------------------------------------------------------------------------- processes


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line), from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:  # exited while we looked
            continue
        table[int(entry.name)] = (
            int(stat.rsplit(")", 1)[1].split()[1]),
            cmdline.decode(errors="replace"),
        )
    return table


def descendants(root: int, table: dict[int, tuple[int, str]]) -> set[int]:
    """``root`` and every process below it."""
    found, frontier = {root}, {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def kill_tree(popen: subprocess.Popen) -> None:
    """SIGKILL a process started in its own session: its process group and every process
    below it (Ray may start workers in process groups of their own)."""
    pids = descendants(popen.pid, process_table())
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=10)


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free loopback port not handed out before by this process (tests/study/test_cluster)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def node_ports() -> list[str]:
    names = (
        "node-manager-port",
        "object-manager-port",
        "dashboard-agent-grpc-port",
        "dashboard-agent-listen-port",
        "runtime-env-agent-port",
        "metrics-export-port",
    )
    return [f"--{name}={free_port()}" for name in names]


def namespaces_problem() -> str | None:
    """Why a private /tmp (a mount namespace with a tmpfs) cannot be made here, if it cannot."""
    if not shutil.which("unshare"):
        return "no unshare command (util-linux)"
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /tmp"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return None


# --------------------------------------------------------------------------- the cluster


@dataclass
class Node:
    name: str
    popen: subprocess.Popen
    log: Path
    killed: bool = False

    @property
    def root(self) -> Path:
        """This node's view of the file system (its private /tmp), seen from outside."""
        return Path(f"/proc/{self.popen.pid}/root")

    def alive(self) -> bool:
        return not self.killed and self.popen.poll() is None


class Cluster:
    """A token-authenticated head and worker nodes, each in its own mount namespace."""

    def __init__(self, logs: Path, env: dict):
        self.logs, self.port = logs, free_port()
        self.token = secrets.token_hex(32)
        self.env = {k: v for k, v in env.items() if not k.startswith("RAY_")}
        # HOME in the node's own /tmp: nothing of a node lands on the shared disk by accident
        self.env.update(
            HOME="/tmp",
            RAY_USAGE_STATS_ENABLED="0",
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=self.token,
        )
        self.nodes: list[Node] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def head(self) -> Node:
        return self.nodes[0]

    def start(self, workers: int) -> None:
        head = [
            "--head",
            f"--port={self.port}",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-port={free_port()}",
            "--dashboard-host=127.0.0.1",
            "--include-dashboard=false",
        ]
        self._start("head", head, HEAD_ENV)
        for index in range(workers):
            self._start(f"worker{index + 1}", [f"--address={self.address}"], {})

    def _start(self, name: str, args: list[str], extra_env: dict) -> None:
        log = self.logs / f"{name}.log"
        ray = [RAY, "start", "--block", "--disable-usage-stats", "--num-cpus=1"]
        ray += ["--object-store-memory=80000000", *node_ports(), *args]
        # the node's own /tmp: a tmpfs in a mount namespace of its own, gone with its processes
        command = ["unshare", "-m", "--propagation", "private", "sh", "-c"]
        command += ['mount -t tmpfs -o size=2g tmpfs /tmp && exec "$@"', "sh", *ray]
        with log.open("w") as out:
            popen = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**self.env, **extra_env},
                start_new_session=True,
            )
        self.nodes.append(Node(name, popen, log))
        deadline = time.monotonic() + NODE_START_S
        while BANNER not in log.read_text():
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start {name} failed:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)

    def private_tmp(self) -> bool:
        """Every node's /tmp is a file system of its own, not this machine's."""
        try:
            devices = {os.stat(node.root / "tmp").st_dev for node in self.nodes}
        except OSError:  # a node that already ended
            return False
        return len(devices | {os.stat("/tmp").st_dev}) == len(self.nodes) + 1

    def node_of(self, table: dict[int, tuple[int, str]]) -> dict[int, str]:
        """pid -> name of the live node it runs under."""
        owner = {}
        for node in self.nodes:
            if node.alive():
                owner.update(dict.fromkeys(descendants(node.popen.pid, table), node.name))
        return owner

    def stop(self) -> None:
        for node in reversed(self.nodes):
            kill_tree(node.popen)


# --------------------------------------------------------------------------- the study


def write_inputs(shared: Path) -> Path:
    """The corpus and the spec on the shared folder; the spec's path."""
    rng, words = random.Random(0), WORDS.split()
    lines = (" ".join(rng.choice(words) for _ in range(12)) for _ in range(4000))
    corpus = shared / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    spec = {
        "name": NAME,
        "trainer": "torch",
        "data": {
            "corpus": str(corpus),
            "tokenizer": "char",
            "vocab_size": 64,
            "seq_len": 16,
            "cache_dir": str(shared / "cache"),
        },
        "model": {"heads": 2, "width_multiple": 2},
        "space": {"depths": [1, 2], "budgets": [2e4], "seeds": 1},
        "train": {
            "steps": STEPS,
            "batch_size": 4,
            "lr": 3e-3,
            "warmup_steps": 10,
            "eval_every": EVAL_EVERY,
            "eval_batches": 1,
        },
        "resources": {
            "cpu": WORKER_CPU,
            "workers_per_trial": 2,
            "retries": 2,
            "max_concurrent": 1,
        },
    }
    path = shared / "rehearsal.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def requested_trials(spec_path: Path) -> dict[str, str]:
    """trial id -> trial name of the study's grid, as the dwtune under test plans it."""
    from dwtune.core.records import grid_requests
    from dwtune.core.spec import load_spec

    return {r.trial_id: r.name for r in grid_requests(load_spec(spec_path))}


def read_records(experiment: Path) -> dict[str, dict]:
    """trial id -> its record as stored (raw JSON: fields the code under test may lack)."""
    records = {}
    for path in sorted((experiment / "trials").glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            raw = json.loads(path.read_text())
            records[raw["trial_id"]] = raw
    return records


# --------------------------------------------------------------------------- watching


@dataclass
class Watch:
    """What the script saw of the study, from outside the cluster."""

    trials: dict[str, str]  # id -> name
    experiment: Path
    # trial -> the sets of nodes its Ray Train workers ran on at one moment
    worker_nodes: dict[str, set] = field(default_factory=dict)
    spans: dict[str, bool] = field(default_factory=dict)  # trial -> seen on >= 2 nodes at once
    # trial -> [(seconds, step of its latest checkpoint)], each change as seen
    checkpoints: dict[str, list] = field(default_factory=dict)
    train_runs: dict[str, set] = field(default_factory=dict)  # trial -> snapshot folders
    pythonpath: set = field(default_factory=set)  # PYTHONPATH of the Ray Train workers seen
    now: dict = field(default_factory=dict)  # the latest look's trial -> nodes
    cpu: dict = field(default_factory=dict)  # pid -> (kind, CPU seconds) as last seen
    driver_pid: int = 0
    started: float = field(default_factory=time.monotonic)

    def trial_in(self, path: str) -> str | None:
        parts = set(Path(path).parts)
        for trial_id, name in self.trials.items():
            if trial_id in parts or name in parts:
                return trial_id
        return None

    def latest(self, trial: str) -> int:
        return max((step for _, step in self.checkpoints.get(trial, [])), default=0)

    def look(self, cluster: Cluster) -> dict[str, set]:
        """One look: trial -> nodes its Ray Train workers are on now (also recorded)."""
        table = process_table()
        owner = cluster.node_of(table)
        running = self._running_trial(table, owner)
        now: dict[str, set] = {}
        for pid, (_, cmdline) in table.items():
            if not cmdline.startswith(TRAIN_WORKER) or pid not in owner:
                continue
            trial = self.trial_in(_cwd(pid)) or running or "unattributed"
            now.setdefault(trial, set()).add(owner[pid])
            self.pythonpath.add(_environ(pid).get("PYTHONPATH", ""))
        for trial, nodes in now.items():
            self.worker_nodes.setdefault(trial, set()).update(nodes)
            self.spans[trial] = self.spans.get(trial, False) or len(nodes) >= 2
        self._snapshots(cluster)
        driver = descendants(self.driver_pid, table) if self.driver_pid else set()
        self._count_cpu(table, set(owner) | driver)
        self.now = now
        return now

    def _count_cpu(self, table: dict[int, tuple[int, str]], pids: set[int]) -> None:
        """CPU seconds of every process of the cluster and the driver, as last seen."""
        for pid in pids:
            with contextlib.suppress(OSError, IndexError, ValueError, KeyError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                seconds = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
                self.cpu[pid] = (_kind(table[pid][1]), seconds)

    def cpu_by_kind(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for kind, seconds in self.cpu.values():
            totals[kind] = totals.get(kind, 0.0) + seconds
        ranked = sorted(totals.items(), key=lambda item: -item[1])
        return {"total": round(sum(totals.values()), 1)} | {k: round(v, 1) for k, v in ranked}

    def _running_trial(self, table, owner) -> str | None:
        """The trial whose Tune function runs now (one at a time: max_concurrent 1)."""
        for pid, (_, cmdline) in table.items():
            if cmdline.startswith(TUNE_TRIAL) and pid in owner:
                trial = self.trial_in(_cwd(pid))
                if trial:
                    return trial
        return None

    def _snapshots(self, cluster: Cluster) -> None:
        places = [self.experiment]
        places += [n.root / "tmp" / "ray" for n in cluster.nodes if n.alive()]
        for place in places:
            with contextlib.suppress(OSError):
                for path in place.rglob(SNAPSHOT):
                    self._snapshot(path)

    def _snapshot(self, path: Path) -> None:
        try:
            latest = json.loads(path.read_text()).get("latest_checkpoint_result") or {}
        except (OSError, ValueError):
            return  # being written
        trial = self.trial_in(str(path))
        step = (latest.get("metrics") or {}).get("step")
        if trial is None or step is None:
            return
        where = str(path.parent).split("/root", 1)[-1]  # a node's /tmp or the shared folder
        self.train_runs.setdefault(trial, set()).add(where)
        seen = self.checkpoints.setdefault(trial, [])
        if not seen or seen[-1][1] != step:
            seen.append((round(time.monotonic() - self.started, 1), int(step)))


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _kind(cmdline: str) -> str:
    """A short name for a process: Ray's worker title, a Python script's, or the program."""
    words = cmdline.split()
    if not words:
        return "exited, or no command line"
    if words[0].startswith("ray::"):
        return words[0].split(".")[0]
    if "dwtune" in words[1:4]:
        return "dwtune driver"
    script = next((w for w in words[1:4] if w.endswith(".py")), None)
    return "/".join(Path(script).parts[-2:]) if script else Path(words[0]).name


def _cwd(pid: int) -> str:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/cwd")
    return ""


def _environ(pid: int) -> dict:
    with contextlib.suppress(OSError):
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return dict(e.decode(errors="replace").split("=", 1) for e in raw if b"=" in e)
    return {}


# --------------------------------------------------------------------------- drivers


@dataclass
class Driver:
    popen: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_driver(cluster: Cluster, spec: Path, storage: Path, log: Path) -> Driver:
    """``dwtune run`` in the head's mount namespace (the module docstring says why)."""
    command = ["nsenter", f"--mount=/proc/{cluster.head.popen.pid}/ns/mnt", "--"]
    command += [sys.executable, "-m", "dwtune", "run", str(spec), "--address", cluster.address]
    command += ["--storage", str(storage), "--grid-only", "-v"]
    with log.open("w") as out:
        popen = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=cluster.env, start_new_session=True
        )
    return Driver(popen, log)


def wait_for(predicate, driver: Driver, rehearsal: Rehearsal) -> str:
    """Look until ``predicate()`` holds ("met"), the driver ends ("ended"), something failed
    ("failed": the reason is in ``rehearsal.failures``) or time is up ("timeout")."""
    rehearsal.watch.driver_pid = driver.popen.pid
    while time.monotonic() < rehearsal.deadline:
        rehearsal.watch.look(rehearsal.cluster)
        if predicate():
            return "met"
        if rehearsal.failed(driver):
            return "failed"
        if driver.popen.poll() is not None:
            rehearsal.watch.look(rehearsal.cluster)
            return "ended"
        time.sleep(POLL_S)
    return "timeout"


def wait_quiet(cluster: Cluster, watch: Watch, seconds: float) -> None:
    """Until no Ray Train worker is left (a killed driver's job is being torn down)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and watch.look(cluster):
        time.sleep(POLL_S)


# --------------------------------------------------------------------------- the rehearsal


@dataclass
class Rehearsal:
    cluster: Cluster
    spec: Path
    storage: Path
    logs: Path
    deadline: float
    watch: Watch
    failures: list = field(default_factory=list)
    events: list = field(default_factory=list)  # what was done, in order
    resumes: list = field(default_factory=list)  # one per kill that interrupted a trial
    finished_before: dict = field(default_factory=dict)  # trial -> record mtime at the kill
    driver_outputs: list = field(default_factory=list)
    target: tuple = ()  # what the next kill hits
    node_errors: list = field(default_factory=list)  # errors in the nodes' Ray logs

    def records(self) -> dict[str, dict]:
        return read_records(self.watch.experiment)

    def event(self, text: str) -> None:
        self.events.append(f"{time.monotonic() - self.watch.started:6.1f} s: {text}")

    def failed(self, driver: Driver) -> bool:
        """Stop at the first trial recorded failed, or the first failed attempt of a trial
        no kill interrupted: nothing here should fail, and a failing attempt costs minutes."""
        for trial, record in self.records().items():
            if record.get("status") == "failed":
                error = (record.get("error") or "").strip()
                self.failures.append(
                    f"{self.watch.trials.get(trial, trial)} recorded failed: {error[:600]}"
                )
                return True
        expected = {
            self.watch.trials[r["trial"]] for r in self.resumes if r["after"] == "node kill"
        }
        pattern = r"^ *(\S+): attempt \d+ failed \((.*)\); retrying$"
        for name, error in re.findall(pattern, driver.output(), re.MULTILINE):
            if name not in expected:
                self.failures.append(f"{name}: an attempt failed: {error[:600]}")
                return True
        return False

    def finished(self) -> set[str]:
        return {t for t, r in self.records().items() if r.get("status") == "finished"}

    def run(self) -> None:
        self.event(f"{len(self.cluster.nodes)} nodes up, each with a private /tmp")
        if self.first_driver():
            self.second_driver()

    def first_driver(self) -> bool:
        """Run 1: a worker node killed under the first trial past its first checkpoint; the
        driver killed once a trial is recorded and the next has checkpointed. Whether the
        rehearsal goes on."""
        driver = start_driver(self.cluster, self.spec, self.storage, self.logs / "driver1.log")
        how = wait_for(self.node_kill_point, driver, self)
        if how != "met":
            self._stopped(
                driver,
                "driver 1",
                how,
                "before a trial had checkpointed with a worker on a worker node: no node kill",
            )
            return False
        self.kill_node()
        how = wait_for(self.driver_kill_point, driver, self)
        if how != "met":
            self._stopped(
                driver,
                "driver 1",
                how,
                "before one trial was recorded and another had checkpointed: no driver kill",
            )
            return False
        trial = self.target[0]
        step = self.watch.latest(trial)
        kill_tree(driver.popen)
        self.driver_outputs.append(driver.output())
        self.finished_before = {t: _record_mtime(self.watch.experiment, t) for t in self.finished()}
        self.event(
            f"driver 1 SIGKILLed: {len(self.finished_before)} trial(s) recorded, "
            f"{self.watch.trials[trial]} checkpointed at step {step}"
        )
        self.resumes.append({"trial": trial, "after": "driver kill", "checkpoint": step})
        wait_quiet(self.cluster, self.watch, 30)
        return True

    def node_kill_point(self) -> bool:
        """A running trial past its first checkpoint (and a checkpoint from its end) with a
        Ray Train worker on a live worker node: ``self.target`` = (trial, that node)."""
        done = self.finished()
        for trial, nodes in self.watch.now.items():
            step = self.watch.latest(trial)
            if trial in done or not 0 < step < STEPS - EVAL_EVERY:
                continue
            hosts = [n for n in self.cluster.nodes[1:] if n.name in nodes and n.alive()]
            if hosts:
                self.target = (trial, hosts[0])
                return True
        return False

    def kill_node(self) -> None:
        trial, node = self.target
        step = self.watch.latest(trial)
        kill_tree(node.popen)
        node.killed = True
        self.event(
            f"{node.name} SIGKILLed (its ray start process group and every process below) "
            f"while {self.watch.trials[trial]} had a worker on it, checkpointed at step {step}"
        )
        self.resumes.append({"trial": trial, "after": "node kill", "checkpoint": step})

    def driver_kill_point(self) -> bool:
        """One trial recorded finished and another checkpointed: ``self.target`` = (it,)."""
        done = self.finished()
        going = [t for t in self.watch.trials if t not in done and self.watch.latest(t) > 0]
        going = [t for t in going if t not in {r["trial"] for r in self.resumes}]
        self.target = tuple(going[:1])
        return bool(done) and bool(going)

    def second_driver(self) -> None:
        """Run 2, the same command, to the end."""
        driver = start_driver(self.cluster, self.spec, self.storage, self.logs / "driver2.log")
        how = wait_for(lambda: False, driver, self)
        if how == "ended" and driver.popen.returncode == 0:
            self.event("driver 2 ended, exit 0")
            self.driver_outputs.append(driver.output())
            return
        self._stopped(driver, "driver 2", how, "after the driver kill")

    def _stopped(self, driver: Driver, name: str, how: str, when: str) -> None:
        """A driver that ended, failed or ran out of time where it should not have."""
        if how in ("failed", "timeout"):
            self.node_errors = node_errors(self.cluster)  # before the driver's job is torn down
            kill_tree(driver.popen)
        code = driver.popen.returncode
        what = {"timeout": "ran out of time", "failed": "was stopped: a trial failed"}
        self.failures.append(
            f"{name} {what.get(how, f'exited {code}')} {when}"
            + (f" ({_last_line(driver.output())})" if how == "ended" else "")
        )
        self.event(f"{name} {how}, exit {code}")
        self.driver_outputs.append(driver.output())


ERROR_LINE = re.compile(r"^(?:\S+\.)?(\w+(?:Error|Exception)): (.+)$")


def node_errors(cluster: Cluster, most: int = 6) -> list[str]:
    """Distinct exception lines in the live nodes' Ray worker logs (their private /tmp), named
    by node: what a failed attempt raised, in full (the driver shows a shortened line)."""
    found: dict[str, str] = {}
    for node in cluster.nodes:
        if not node.alive():
            continue
        # session_*, not session_latest: that link's target is absolute, this machine's /tmp
        for logs in (node.root / "tmp" / "ray").glob("session_2*/logs"):
            for path in sorted(logs.rglob("*.err")) + sorted(logs.rglob("train/*.log")):
                with contextlib.suppress(OSError):
                    for line in path.read_text(errors="replace").splitlines():
                        match = ERROR_LINE.match(line.strip())
                        if match and match.group(0) not in found:
                            found[match.group(0)] = f"{node.name}: {match.group(0)[:400]}"
    return list(found.values())[:most]


def _record_mtime(experiment: Path, trial: str) -> float:
    with contextlib.suppress(OSError):
        return (experiment / "trials" / f"{trial}.json").stat().st_mtime
    return 0.0


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# --------------------------------------------------------------------------- the answer


def resumed_from(rehearsal: Rehearsal, records: dict[str, dict]) -> tuple[dict, dict]:
    """trial -> the step its training resumed from after each kill, and where that number
    comes from: the record's ``resumed_from_step`` (the last resume of the trial) when it has
    one, else the retried attempt's first report (the driver's "attempt N reports from step
    S", less one eval interval), else the checkpoints seen (the first one after the kill less
    one eval interval)."""
    steps, sources = {}, {}
    output = "\n".join(rehearsal.driver_outputs)
    for resume in rehearsal.resumes:
        trial = resume["trial"]
        name = rehearsal.watch.trials[trial]
        record = records.get(trial, {})
        if "resumed_from_step" in record:
            steps[name], sources[name] = int(record["resumed_from_step"]), "record"
            continue
        found = re.findall(rf"{re.escape(name)}: attempt \d+ reports from step (\d+)", output)
        if found and resume["after"] == "node kill":
            steps[name], sources[name] = int(found[-1]) - EVAL_EVERY, "driver output"
            continue
        later = _first_checkpoint_after(rehearsal.watch, trial, resume["checkpoint"])
        steps[name] = None if later is None else max(0, later - EVAL_EVERY)
        sources[name] = "checkpoints seen"
    return steps, sources


def _first_checkpoint_after(watch: Watch, trial: str, step: int) -> int | None:
    """The first checkpoint step seen after the one at ``step``, the kill's (None: none)."""
    seen = [s for _, s in watch.checkpoints.get(trial, [])]
    if step not in seen:
        return None
    later = seen[seen.index(step) + 1 :]
    return later[0] if later else None


def trained_twice(rehearsal: Rehearsal) -> list[str]:
    """Trials whose training went back to step 0 after having checkpointed (a checkpoint
    seen at or below an earlier one), and recorded trials trained again after the kill."""
    twice = set()
    for trial, seen in rehearsal.watch.checkpoints.items():
        steps = [s for _, s in seen]
        if any(s <= max(steps[:i]) for i, s in enumerate(steps) if i):
            twice.add(trial)
    for trial, mtime in rehearsal.finished_before.items():
        if _record_mtime(rehearsal.watch.experiment, trial) != mtime:
            twice.add(trial)
    return sorted(rehearsal.watch.trials[t] for t in twice)


def summary(rehearsal: Rehearsal, wall_s: float, checks: dict) -> dict:
    watch, records = rehearsal.watch, rehearsal.records()
    names = watch.trials
    steps, sources = resumed_from(rehearsal, records)
    lost = sorted(names[t] for t in names if records.get(t, {}).get("status") != "finished")
    twice = trained_twice(rehearsal)
    across = sorted(names.get(t, t) for t, spans in watch.spans.items() if spans)
    failures = list(rehearsal.failures)
    if not across:
        failures.append("no sharded trial was seen with its workers on two nodes at once")
    if lost:
        failures.append(f"trials lost (no finished record): {', '.join(lost)}")
    if twice:
        failures.append(f"trials trained twice: {', '.join(twice)}")
    for name, step in steps.items():
        if not step:
            failures.append(f"{name} resumed from step {step} ({sources[name]}), not > 0")
    failures += [f"check failed: {name}" for name, ok in checks.items() if not ok]
    return {
        "ok": not failures,
        "failures": failures,
        "nodes": len(rehearsal.cluster.nodes),
        "trials": len(names),
        "sharded_trials_across_nodes": len(across),
        "resumed_from_step": steps,
        "resumed_from_step_source": sources,
        # each kill: the trial it interrupted and the step of its latest checkpoint then
        "kills": [
            {"after": r["after"], "trial": names[r["trial"]], "checkpointed_step": r["checkpoint"]}
            for r in rehearsal.resumes
        ],
        "trials_lost": len(lost),
        "trials_run_twice": len(twice),
        "wall_s": round(wall_s, 1),
        "checks": checks,
        "events": rehearsal.events,
        "worker_nodes": {names.get(t, t): sorted(n) for t, n in watch.worker_nodes.items()},
        "checkpoints_seen": {  # [seconds, step] as seen
            names[t]: [list(seen_at) for seen_at in seen] for t, seen in watch.checkpoints.items()
        },
        "train_run_folders": {names[t]: sorted(p) for t, p in watch.train_runs.items()},
        "records": {
            names.get(t, t): {
                "status": r.get("status"),
                "steps": r.get("steps"),
                "node": r.get("node"),
                "workers": r.get("workers"),
                "resumed_from_step": r.get("resumed_from_step", "absent"),
                "error": (r.get("error") or "").strip().splitlines()[:1],
            }
            for t, r in records.items()
        },
        "node_errors": rehearsal.node_errors,
        # CPU seconds of the nodes' and drivers' processes as last seen (polled; a lower bound)
        "cpu_s_seen": watch.cpu_by_kind(),
        "dwtune_under_test": str(_dwtune_path()),
        "worker_pythonpath": sorted(watch.pythonpath),
    }


def _dwtune_path() -> Path:
    import dwtune

    return Path(dwtune.__file__).parent


def human(result: dict) -> str:
    lines = [
        f"cluster rehearsal: {'ok' if result['ok'] else 'FAILED'} in {result['wall_s']} s",
        f"  {result['nodes']} nodes, {result['trials']} trials, "
        f"{result['sharded_trials_across_nodes']} sharded across nodes, "
        f"{result['trials_lost']} lost, {result['trials_run_twice']} trained twice",
        f"  resumed from step: {result['resumed_from_step']}",
        *(f"  {event}" for event in result["events"]),
        *(f"  failed: {failure}" for failure in result["failures"]),
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep", action="store_true", help="keep the shared folder and logs")
    parser.add_argument(
        "--shared-dir",
        help="folder standing for the network file system (default: a new one under /var/tmp)",
    )
    parser.add_argument(
        "--timeout", type=float, default=900, help="seconds for the whole run (default 900)"
    )
    return parser.parse_args(argv)


def rehearse(args: argparse.Namespace, work: Path, shared: Path) -> dict:
    start = time.monotonic()
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    spec = write_inputs(shared)
    storage = shared / "experiments"
    watch = Watch(requested_trials(spec), storage / NAME)
    cluster = Cluster(logs, dict(os.environ))
    try:
        cluster.start(workers=2)
        checks = {"private_tmp": cluster.private_tmp()}
        rehearsal = Rehearsal(cluster, spec, storage, logs, start + args.timeout, watch)
        rehearsal.run()
        checks["token_auth"] = all(
            _environ(n.popen.pid).get("RAY_AUTH_MODE") == "token"
            for n in cluster.nodes
            if n.alive()
        )
        return summary(rehearsal, time.monotonic() - start, checks)
    finally:
        cluster.stop()


def broken(failure: str, start: float) -> dict:
    """The answer when the rehearsal itself could not go on (a node that never started...)."""
    return {
        "ok": False,
        "failures": [failure],
        "nodes": 0,
        "trials": 0,
        "sharded_trials_across_nodes": 0,
        "resumed_from_step": {},
        "trials_lost": None,
        "trials_run_twice": None,
        "wall_s": round(time.monotonic() - start, 1),
        "events": [],
    }


def under_private_tmp() -> Path | None:
    """The Python environment or checkout this runs from, where it lies under /tmp: every node
    mounts its own empty /tmp, so none of them would find it (as no cluster node sees the
    driver's /tmp)."""
    tmp = Path("/tmp").resolve()
    for path in (Path(sys.prefix).resolve(), Path(__file__).resolve()):
        if path.is_relative_to(tmp):
            return path
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = namespaces_problem()
    if problem:
        print(f"cluster rehearsal: this machine does not allow mount namespaces ({problem})")
        return EXIT_UNSUPPORTED
    hidden = under_private_tmp()
    if hidden is not None:
        print(
            f"cluster rehearsal: {hidden} lies under /tmp, which each rehearsal node mounts "
            "empty; run it from a checkout and virtual environment outside /tmp"
        )
        return EXIT_UNSUPPORTED
    work = Path(tempfile.mkdtemp(prefix="dwtune-rehearsal-", dir="/var/tmp"))
    shared = Path(args.shared_dir) if args.shared_dir else work / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        result = rehearse(args, work, shared)
    except Exception as exc:  # one JSON object even so; the traceback on stderr
        traceback.print_exc()
        result = broken(f"the rehearsal raised {type(exc).__name__}: {exc}", start)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
            if args.shared_dir:
                shutil.rmtree(shared / "experiments", ignore_errors=True)
    if args.keep:
        result["kept"] = str(work)
    print(json.dumps(result, indent=2) if args.json else human(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
