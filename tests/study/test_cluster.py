"""Clusters: cluster.yaml against Ray's schema, a real two-node Ray cluster on this machine
driven through ``--address``, and ``ray job submit`` to a head with token authentication.

Every Ray process here is started by the test (``ray start --block`` in its own temporary
directory, on free ports, with its own HOME and token) and torn down by pid in the fixture
finalizer; other Ray instances on the machine are never touched.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from dwtune.storage.store import ExperimentStore
from tests.helpers.processes import Processes

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
START_TIMEOUT_S = 90
BANNER = "Ray runtime started"


# --------------------------------------------------------------------------- cluster.yaml

# GPU memory per GPU of the instance types a node type may name (AWS data sheets, GB).
GPU_MEMORY_GB = {"p5.48xlarge": 80, "p4de.24xlarge": 80, "p5en.48xlarge": 141}


def _cluster_config() -> dict:
    return yaml.safe_load((REPO / "cluster.yaml").read_text())


def _gpu_types(config: dict) -> dict:
    types = config["available_node_types"]
    return {name: t for name, t in types.items() if t["resources"].get("GPU")}


def test_cluster_yaml_validates_against_the_schema_ray_ships():
    import jsonschema
    import ray.autoscaler

    schema_path = Path(ray.autoscaler.__file__).with_name("ray-schema.json")
    jsonschema.validate(_cluster_config(), json.loads(schema_path.read_text()))


def test_cluster_yaml_passes_the_launchers_own_checks_after_defaults_are_filled():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(copy.deepcopy(_cluster_config()))
    validate_config(config)
    gpu_types = _gpu_types(config)
    assert gpu_types and any(t["min_workers"] >= 1 for t in gpu_types.values())
    assert config["available_node_types"][config["head_node_type"]]["resources"] == {"CPU": 0}
    # every node boots a named AMI (the launcher's default is Ubuntu 18.04, glibc 2.27)
    assert all(t["node_config"].get("ImageId") for t in config["available_node_types"].values())


def test_cluster_yaml_runs_everything_in_the_published_image():
    config = _cluster_config()
    assert config["docker"]["image"] == _published_tag()
    assert "-v /mnt/dwtune:/mnt/dwtune" in config["docker"]["run_options"]
    setup = " ".join(config["setup_commands"] + config["head_setup_commands"])
    assert "pip install" not in setup  # dwtune, torch and Ray come with the image


def test_gpu_workers_have_the_memory_the_shipped_gpu_specs_assume():
    needs = {
        path.name: (yaml.safe_load(path.read_text()).get("resources") or {}).get("gpu_memory_gb")
        for path in (REPO / "search_spaces").glob("*.yaml")
    }
    needs = {name: gb for name, gb in needs.items() if gb}
    assert needs["paper.yaml"] == 79.65 and needs["gpu_pilot.yaml"] >= 139.8
    gpu_types = _gpu_types(_cluster_config())
    memory = {
        name: GPU_MEMORY_GB[t["node_config"]["InstanceType"]] for name, t in gpu_types.items()
    }
    for spec, gb in needs.items():  # every shipped GPU spec has a node type it fits
        assert any(have >= gb for have in memory.values()), (spec, gb, memory)
    assert memory["worker.h100"] == 80 and memory["worker.h200"] == 141
    for t in gpu_types.values():
        assert t["resources"]["GPU"] == 8 and t["resources"]["CPU"] >= 8 * 8  # 8 trials of cpu: 8


def test_cluster_yaml_mounts_efs_with_an_nfs_rule_from_the_nodes():
    config = _cluster_config()
    rules = config["provider"]["security_group"]["IpPermissions"]
    nfs = [r for r in rules if r["FromPort"] <= 2049 <= r["ToPort"] and r["IpProtocol"] == "tcp"]
    assert nfs and all(r["CidrIp"] != "0.0.0.0/0" for rule in nfs for r in rule["IpRanges"])
    host = " ".join(config["initialization_commands"])  # on the host, before the container
    assert "mount -t nfs4" in host and "/mnt/dwtune" in host and "chown 1000:1000" in host
    setup = " ".join(config["setup_commands"])
    assert "/mnt/dwtune/cache" in setup and "/mnt/dwtune/corpora" in setup


def test_cluster_yaml_keeps_ray_private_and_token_authenticated():
    config = _cluster_config()
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    ray_starts = [c for c in starts if "ray start" in c]
    assert ray_starts and all("RAY_AUTH_MODE=token" in c for c in ray_starts)
    head = next(c for c in config["head_start_ray_commands"] if "--head" in c)
    assert "--dashboard-host=127.0.0.1" in head
    ranges = [
        r["CidrIp"]
        for p in config["provider"]["security_group"]["IpPermissions"]
        for r in p["IpRanges"]
    ]
    assert "0.0.0.0/0" not in ranges
    assert any("auth_token" in remote for remote in config["file_mounts"])


def test_cluster_yaml_documents_prepare_before_run():
    text = (REPO / "cluster.yaml").read_text()
    assert 0 <= text.index("dwtune prepare") < text.index("dwtune run")
    assert text.count("data.cache_dir=/mnt/dwtune/cache") >= 2  # prepare and run alike


# --------------------------------------------------------------------------- Dockerfile


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    lines = (REPO / "Dockerfile").read_text().splitlines()
    joined, current = [], ""
    for line in lines:
        if line.lstrip().startswith("#") and not current:
            continue
        current += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            if current.strip():
                joined.append(current.strip())
            current = ""
    return [(i.split(None, 1)[0].upper(), i.split(None, 1)[1]) for i in joined]


def _published_tag() -> str:
    labels = " ".join(args for op, args in _dockerfile() if op == "LABEL")
    return re.search(r'org\.opencontainers\.image\.ref\.name="([^"]+)"', labels).group(1)


def test_dockerfile_installs_the_pinned_torch_from_the_pytorch_cuda_index():
    text = " ".join(args for op, args in _dockerfile() if op in ("RUN", "ARG"))
    copies = [args for op, args in _dockerfile() if op == "COPY"]
    assert "constraints.txt /tmp/constraints.txt" in copies  # torch==2.13.0 is pinned there
    pinned = "\"$(grep '^torch==' /tmp/constraints.txt)\""  # torch's pin, not its deps'
    assert f"pip install --index-url ${{TORCH_INDEX}} {pinned}" in text
    assert re.search(r"TORCH_INDEX=https://download\.pytorch\.org/whl/cu1\d\d\b", text)
    assert "torch.version.cuda" in text  # the build fails if a CPU wheel slipped in
    ray = re.search(r'"ray\[default,tune\]==([\d.]+)"', text).group(1)
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    ray_range = next(Requirement(d) for d in dependencies if d.startswith("ray"))
    assert ray_range.specifier.contains(ray)  # the image's Ray is one dwtune supports
    assert " /src" in text and "-c /tmp/constraints.txt" in text  # dwtune itself, pinned deps


def test_dockerfile_is_python_311_slim_and_runs_as_a_non_root_user():
    instructions = _dockerfile()
    args = dict(a.split("=", 1) for op, a in instructions if op == "ARG" and "=" in a)
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    stages = [i for i, (op, _) in enumerate(instructions) if op == "FROM"]
    final = instructions[stages[-1] :]
    users = [a for op, a in final if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert "--uid 1000" in " ".join(a for op, a in final if op == "RUN")
    assert not any(op == "COPY" and ".git" in a for op, a in instructions)


def test_dockerfile_copies_only_what_exists_and_dockerignore_lets_in():
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for op, args in _dockerfile():
        if op != "COPY" or "--from=" in args:
            continue
        *sources, _ = [a for a in args.split() if not a.startswith("--")]
        for source in sources:
            assert (REPO / source).exists(), source
            assert source.rstrip("/") in allowed, f"{source} is not let in by .dockerignore"


# --------------------------------------------------------------------------- KubeRay


def _rayjob_documents() -> list[dict]:
    return list(yaml.safe_load_all((REPO / "deploy" / "rayjob.yaml").read_text()))


def _rayjob() -> dict:
    return next(d for d in _rayjob_documents() if d["kind"] == "RayJob")


def _pod_specs(job: dict) -> list[tuple[str, dict]]:
    cluster = job["spec"]["rayClusterSpec"]
    groups = [("head", cluster["headGroupSpec"])]
    groups += [(g["groupName"], g) for g in cluster["workerGroupSpecs"]]
    return [(name, group["template"]["spec"]) for name, group in groups]


def test_rayjob_is_a_kuberay_v1_job_that_prepares_then_runs():
    job = _rayjob()
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    entrypoint = job["spec"]["entrypoint"]
    assert 0 <= entrypoint.index("dwtune prepare") < entrypoint.index("dwtune run")
    assert "--storage /mnt/dwtune/experiments" in entrypoint
    assert entrypoint.count("data.cache_dir=/mnt/dwtune/cache") == 2
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    cluster = job["spec"]["rayClusterSpec"]
    ray = re.search(r"ray\[default,tune\]==([\d.]+)", (REPO / "Dockerfile").read_text()).group(1)
    assert cluster["rayVersion"] == ray
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # no trial on the head


def test_rayjob_uses_the_published_image_with_gpus_and_the_shared_volume():
    job = _rayjob()
    claims = {
        d["metadata"]["name"] for d in _rayjob_documents() if d["kind"] == "PersistentVolumeClaim"
    }
    pvc = next(d for d in _rayjob_documents() if d["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]  # every pod mounts it
    workers = 0
    for name, pod in _pod_specs(job):
        assert pod["securityContext"]["runAsNonRoot"] is True
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod["containers"]:
            assert container["image"] == _published_tag(), name
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            shared = volumes[mounts["/mnt/dwtune"]]
            assert shared["persistentVolumeClaim"]["claimName"] in claims
            if name == "head":
                assert "nvidia.com/gpu" not in container["resources"]["limits"]
                continue
            workers += 1
            limits, requests = container["resources"]["limits"], container["resources"]["requests"]
            assert limits["nvidia.com/gpu"] == requests["nvidia.com/gpu"] == 8
            assert "/dev/shm" in mounts
    assert workers == len(job["spec"]["rayClusterSpec"]["workerGroupSpecs"]) >= 1
    replicas = [g["replicas"] for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]]
    assert max(replicas) >= 1  # a GPU node up when `dwtune run` checks its trials fit


# --------------------------------------------------------------------------- a local cluster


_HANDED_OUT: set[int] = set()  # every port _free_port has returned in this process


def _free_port() -> int:
    """A free loopback port never returned before. Why the memory: a port is free only until
    it is bound, and the kernel may hand the same one out again once the probe socket closes
    (CI once gave node_manager and dashboard_agent_grpc both 43701; `ray start` refused)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def _node_ports() -> list[str]:
    """Every port a node listens on, free ones, so clusters started in parallel never clash."""
    names = (
        "node-manager-port",
        "object-manager-port",
        "dashboard-agent-grpc-port",
        "dashboard-agent-listen-port",
        "runtime-env-agent-port",
        "metrics-export-port",
    )
    return [f"--{name}={_free_port()}" for name in names]


class LocalCluster:
    """A Ray head and extra nodes on this machine, each a ``ray start --block`` process."""

    def __init__(self, root: Path):
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        self.temp_dir = tempfile.mkdtemp(prefix="dwr", dir="/tmp")  # short: socket paths
        self.token = secrets.token_hex(32)
        self.port = _free_port()
        self.dashboard_port = _free_port()
        self.starters: list[subprocess.Popen] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def env(self, token: bool = True) -> dict:
        """Environment of the cluster's processes and of clients (without the token if asked)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(HOME=str(self.home), RAY_USAGE_STATS_ENABLED="0")
        if token:
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token)
        return env

    def start_head(self, num_cpus: int, dashboard: bool = False) -> None:
        args = [
            "--head",
            f"--port={self.port}",
            f"--temp-dir={self.temp_dir}",
            f"--ray-client-server-port={_free_port()}",
            f"--dashboard-port={self.dashboard_port}",
            "--dashboard-host=127.0.0.1",
            f"--include-dashboard={str(dashboard).lower()}",
        ]
        self._start("head", args, num_cpus)

    def add_node(self, num_cpus: int, resources: dict) -> None:
        args = [f"--address={self.address}", f"--resources={json.dumps(resources)}"]
        self._start(f"node{len(self.starters)}", args, num_cpus)

    def _start(self, name: str, args: list[str], num_cpus: int) -> None:
        log = self.root / f"{name}.log"
        command = [
            RAY,
            "start",
            "--block",
            "--disable-usage-stats",
            f"--num-cpus={num_cpus}",
            "--object-store-memory=100000000",
            *_node_ports(),
            *args,
        ]
        with log.open("w") as out:
            self.starters.append(
                subprocess.Popen(
                    command,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env(),
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while BANNER not in log.read_text():
            if self.starters[-1].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start {name} failed:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM every process this cluster started (and their children), then SIGKILL."""
        table = Processes.table()
        roots = {s.pid for s in self.starters}
        roots |= {pid for pid, (_, cmdline) in table.items() if self.temp_dir in cmdline}
        pids = Processes.descendants(roots, table)
        _signal_all(pids, signal.SIGTERM)
        deadline = time.monotonic() + 2  # s; Ray's graceful shutdown can take much longer
        while any(Processes.alive(pid) for pid in pids) and time.monotonic() < deadline:
            for starter in self.starters:
                starter.poll()  # reap our own children so they do not linger as zombies
            time.sleep(0.2)
        _signal_all([pid for pid in pids if Processes.alive(pid)], signal.SIGKILL)
        for starter in self.starters:
            starter.wait(timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _study(write_spec, simulated_raw, name: str, depths: list[int]) -> Path:
    raw = simulated_raw(
        name=name,
        space={"depths": depths, "budgets": [1e6, 1e7], "seeds": 1},
        # ~6 s per trial: the second node starts an actor while the first trains (at 1.6 s a
        # reused actor on one node took all four trials under load)
        simulated={"seconds_per_step": 0.015},
        resources={"cpu": 1, "retries": 0},
    )
    return write_spec(raw)


def _dwtune_run(
    spec: Path, storage: Path, extra: list[str], env: dict
) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "dwtune",
        "run",
        str(spec),
        "--storage",
        str(storage),
        "--grid-only",
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory):
    """One cluster for the module: a token-authenticated head with a dashboard (which
    ``ray job submit`` talks to) and a second node."""
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
    try:
        cluster.start_head(num_cpus=1, dashboard=True)
        cluster.add_node(num_cpus=1, resources={"dwtune_second_node": 1})
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.ray
@pytest.mark.slow
def test_a_study_runs_across_two_nodes_through_address(
    local_cluster, tmp_path, write_spec, simulated_raw
):
    spec = _study(write_spec, simulated_raw, "twonodes", [6, 12])
    done = _dwtune_run(spec, tmp_path, ["--address", local_cluster.address], local_cluster.env())
    assert done.returncode == 0, done.stderr
    assert "2 node(s)" in done.stderr
    records = ExperimentStore(tmp_path / "twonodes").records()
    assert len(records) == 4 and all(r.completed for r in records)
    assert len({r.node for r in records}) == 2
    assert (tmp_path / "twonodes" / "trials.parquet").exists()
    assert len(list((tmp_path / "twonodes" / "tb" / "grid").iterdir())) == 4  # runs by stage


@pytest.mark.ray
def test_an_unreachable_address_is_refused_at_once(tmp_path, write_spec, simulated_raw):
    spec = _study(write_spec, simulated_raw, "nowhere", [6])
    done = _dwtune_run(spec, tmp_path, ["--address", f"127.0.0.1:{_free_port()}"], dict(os.environ))
    assert done.returncode == 2
    assert "cannot reach a Ray cluster" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- ray job submit


def _submit(cluster: LocalCluster, entrypoint: list[str], token: bool):
    command = [RAY, "job", "submit", "--address", cluster.dashboard, "--", *entrypoint]
    return subprocess.run(
        command, capture_output=True, text=True, env=cluster.env(token), timeout=300
    )


@pytest.mark.ray
@pytest.mark.slow
def test_ray_job_submit_runs_a_study_on_a_token_authenticated_head(
    local_cluster, tmp_path, write_spec, simulated_raw
):
    spec = _study(write_spec, simulated_raw, "jobstudy", [6])
    entrypoint = [
        sys.executable,
        "-m",
        "dwtune",
        "run",
        str(spec),
        "--storage",
        str(tmp_path),
        "--grid-only",
    ]
    done = _submit(local_cluster, entrypoint, token=True)
    assert done.returncode == 0, done.stdout + done.stderr
    records = ExperimentStore(tmp_path / "jobstudy").records()
    assert len(records) == 2 and all(r.completed for r in records)
    assert (tmp_path / "jobstudy" / "curves.parquet").exists()


@pytest.mark.ray
def test_ray_job_submit_without_the_token_is_refused(local_cluster, tmp_path):
    marker = tmp_path / "ran"
    done = _submit(local_cluster, ["touch", str(marker)], token=False)
    assert done.returncode != 0
    assert "401" in done.stdout + done.stderr or "Unauthorized" in done.stdout + done.stderr
    assert not marker.exists()


def test_the_shipped_gpu_specs_read_their_corpus_from_the_storage_every_node_mounts():
    """paper.yaml and gpu_pilot.yaml: corpus and token cache on the mount cluster.yaml gives
    every node, so a job's working directory (uploaded by `ray job submit`) carries neither."""
    mount = "/mnt/dwtune"
    assert f"-v {mount}:{mount}" in _cluster_config()["docker"]["run_options"]
    for name in ("paper.yaml", "gpu_pilot.yaml"):
        data = yaml.safe_load((REPO / "search_spaces" / name).read_text())["data"]
        for key in ("corpus", "cache_dir"):
            path = Path(data[key])
            assert path.is_absolute() and path.is_relative_to(mount), (name, key, data[key])
