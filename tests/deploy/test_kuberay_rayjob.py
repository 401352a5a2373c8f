"""deploy/rayjob.yaml as KubeRay and Ray treat it.

- The submitter's shell line, built here exactly as KubeRay builds it, runs under ``bash -ce``
  against a stub ``ray`` that records its arguments; Ray's own ``ray job submit`` parser then
  reads them and the job's entrypoint runs as Ray's job supervisor runs it (a shell), against a
  stub ``dwtune``. Prepare and run must both happen inside the one submitted job.
- The RayJob validates against KubeRay's ray.io/v1 CRD schema (vendored in data/), unknown
  fields rejected, and its cluster has token auth on every pod and on the submitter.

KubeRay source read for this: ray-project/kuberay tag v1.7.0 (commit 59d663ae), the same code
since v1.5.1 for everything used here.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")
# The openAPIV3Schema of the v1 version of ray-operator/config/crd/bases/ray.io_rayjobs.yaml at
# kuberay v1.7.0 (data/README.md says how it was extracted).
CRD_SCHEMA = DATA / "kuberay-v1.7.0-rayjobs-v1.schema.json"

# What KubeRay puts in the RayJob's status before it creates the submitter (K8sJobMode):
# the head service's address (utils.GenerateHeadServiceName: "<rayjob>-head-svc") and a job id.
DASHBOARD_URL = "dwtune-paper-head-svc.default.svc.cluster.local:8265"
JOB_ID = "dwtune-paper-x7k2p"
# ray-operator/controllers/ray/utils/constant.go
RAY_DASHBOARD_GCS_HEALTH_PATH = "api/gcs_healthz"
RAY_DASHBOARD_GCS_HEALTH_CHECK_TIMEOUT_SECONDS = 10
BASE_PYTHON_HEALTH_COMMAND = (
    "python -c \"import urllib.request; r=urllib.request.urlopen('%s', timeout=%d); "
    "exit(0 if b'success' in r.read() else 1)\""
)


def _go_quote(text: str) -> str:
    """Go's strconv.Quote for the JSON strings KubeRay quotes (printable text: JSON's escaping
    of quotes and backslashes is Go's)."""
    return json.dumps(text, ensure_ascii=False)


def kuberay_submitter_command(job: dict) -> list[str]:
    """The submitter container's command + args for a RayJob in K8sJobMode, as KubeRay builds
    them. A transcription of ray-operator/controllers/ray/common/job.go, BuildJobSubmitCommand
    (submissionMode K8sJobMode, SidecarSubmitterRestart irrelevant there), and of
    rayjob_controller.go, configureSubmitterContainer: ``Command =
    utils.GetContainerCommand([]string{"e"})`` (util.go: ``/bin/bash -ce --``; ``-cel`` only
    when the operator runs with ENABLE_LOGIN_SHELL=true) and ``Args = []string{strings.Join(
    jobCmd, " ")}``. The entrypoint goes in as one word of that join, unquoted."""
    spec = job["spec"]
    address = DASHBOARD_URL
    if not address.startswith("http://"):
        address = "http://" + address
    entrypoint = spec["entrypoint"].strip()  # strings.TrimSpace
    health_url = address + "/" + RAY_DASHBOARD_GCS_HEALTH_PATH
    health = BASE_PYTHON_HEALTH_COMMAND % (
        health_url,
        RAY_DASHBOARD_GCS_HEALTH_CHECK_TIMEOUT_SECONDS,
    )
    waiting = _go_quote("Waiting for Ray Dashboard GCS to become healthy at " + address + " ...")
    cmd = ["until", health, ">/dev/null", "2>&1", ";"]
    cmd += ["do", "echo", waiting, ";", "sleep", "2", ";", "done", ";"]
    cmd += ["if", "!", "ray", "job", "status", "--address", address, JOB_ID, ">/dev/null", "2>&1"]
    cmd += [";", "then", "ray", "job", "submit", "--address", address, "--no-wait"]
    if spec.get("runtimeEnvYAML"):
        runtime_env = json.dumps(yaml.safe_load(spec["runtimeEnvYAML"]), separators=(",", ":"))
        cmd += ["--runtime-env-json", _go_quote(runtime_env)]
    if spec.get("metadata"):
        cmd += ["--metadata-json", _go_quote(json.dumps(spec["metadata"], separators=(",", ":")))]
    cmd += ["--submission-id", JOB_ID]
    if spec.get("entrypointNumCpus", 0) > 0:
        cmd += ["--entrypoint-num-cpus", f"{spec['entrypointNumCpus']:f}"]  # Go's %f
    if spec.get("entrypointNumGpus", 0) > 0:
        cmd += ["--entrypoint-num-gpus", f"{spec['entrypointNumGpus']:f}"]
    if spec.get("entrypointResources"):
        cmd += ["--entrypoint-resources", _go_quote(spec["entrypointResources"])]
    cmd += ["--", entrypoint, ";", "fi", ";"]
    cmd += ["ray", "job", "logs", "--address", address, "--follow", JOB_ID]
    return ["/bin/bash", "-ce", "--", " ".join(cmd)]


# --------------------------------------------------------------------------- stubs

RECORDER = """#!{python}
import json, os, sys
name = os.path.basename(sys.argv[0])
entry = {{"argv": sys.argv[1:], "in_job": os.environ.get("STUB_IN_JOB") == "1"}}
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps({{"tool": name, **entry}}) + "\\n")
if name == "ray":  # `ray job status`: no such job yet, so the submitter submits
    sys.exit(1 if sys.argv[1:3] == ["job", "status"] else 0)
if name == "dwtune" and sys.argv[1:2] == [os.environ.get("STUB_FAIL")]:
    sys.exit(3)
sys.exit(0)
"""


def _stub_bin(tmp_path: Path) -> Path:
    """``ray``, ``dwtune`` and ``python`` (KubeRay's dashboard health probe) that record their
    arguments and whether they ran inside the Ray job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("ray", "dwtune", "python"):
        stub = bin_dir / name
        stub.write_text(RECORDER.format(python=sys.executable))
        stub.chmod(0o755)
    return bin_dir


def _calls(log: Path, tool: str) -> list[dict]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [c for c in map(json.loads, lines) if c["tool"] == tool]


def _ray_job_entrypoint(submit_argv: list[str]) -> str:
    """The job's entrypoint as Ray 2.60's CLI makes it: its own click parser reads the
    arguments, and ``submit`` joins the entrypoint words with shlex.join on POSIX
    (ray/dashboard/modules/job/cli.py, submit)."""
    from ray.dashboard.modules.job.cli import submit

    assert submit_argv[:2] == ["job", "submit"], submit_argv
    context = submit.make_context("submit", list(submit_argv[2:]))
    assert context.params["submission_id"] == JOB_ID and context.params["no_wait"]
    return shlex.join(context.params["entrypoint"])


def run_rayjob(job: dict, tmp_path: Path, fail: str | None = None) -> dict:
    """Run KubeRay's submitter line for ``job``, then the job it submitted, against the stubs.
    Returns the submitter's and the job's exit codes and every recorded call."""
    bin_dir = _stub_bin(tmp_path)
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.update(STUB_LOG=str(log), STUB_FAIL=fail or "")
    env.pop("STUB_IN_JOB", None)
    submitter = subprocess.run(
        kuberay_submitter_command(job), env=env, capture_output=True, text=True, timeout=60
    )
    submits = [c for c in _calls(log, "ray") if c["argv"][:2] == ["job", "submit"]]
    job_rc = None
    if len(submits) == 1:
        # ray/dashboard/modules/job/job_supervisor.py, JobSupervisor._exec_entrypoint:
        # subprocess.Popen(entrypoint, shell=True)
        entrypoint = _ray_job_entrypoint(submits[0]["argv"])
        job_env = {**env, "STUB_IN_JOB": "1"}
        done = subprocess.run(entrypoint, shell=True, env=job_env, capture_output=True, timeout=60)
        job_rc = done.returncode
    return {
        "submitter_rc": submitter.returncode,
        "submitter_err": submitter.stderr,
        "submits": submits,
        "job_rc": job_rc,
        "dwtune": _calls(log, "dwtune"),
    }


def _rayjob_documents() -> list[dict]:
    return list(yaml.safe_load_all((REPO / "deploy" / "rayjob.yaml").read_text()))


def _rayjob() -> dict:
    return next(d for d in _rayjob_documents() if d["kind"] == "RayJob")


def _with_entrypoint(entrypoint: str) -> dict:
    job = copy.deepcopy(_rayjob())
    job["spec"]["entrypoint"] = entrypoint
    return job


# --------------------------------------------------------------------------- the entrypoint


def test_the_whole_entrypoint_reaches_ray_as_one_job_and_nothing_runs_in_the_submitter(tmp_path):
    result = run_rayjob(_rayjob(), tmp_path)
    assert result["submitter_rc"] == 0, result["submitter_err"]
    assert len(result["submits"]) == 1  # one job, submitted once
    outside = [c["argv"] for c in result["dwtune"] if not c["in_job"]]
    assert outside == [], f"ran in the submitter pod, not in the Ray job: {outside}"
    assert result["job_rc"] == 0
    commands = [c["argv"] for c in result["dwtune"]]
    assert [argv[0] for argv in commands] == ["prepare", "run"], commands
    prepare, run = commands
    assert prepare[1] == run[1]  # the same spec
    cache = [[a for a in argv if a.startswith("data.cache_dir=")] for argv in commands]
    assert cache[0] and cache[0] == cache[1]  # run memory-maps what prepare tokenized
    assert run[run.index("--storage") + 1].startswith("/mnt/dwtune/")  # the shared volume
    from dwtune.cli import build_parser

    for argv in commands:  # dwtune's own parser accepts each command as it arrives
        build_parser().parse_args(argv)


def test_a_failed_prepare_fails_the_job_and_skips_the_run(tmp_path):
    result = run_rayjob(_rayjob(), tmp_path, fail="prepare")
    assert result["job_rc"] != 0
    assert [c["argv"][0] for c in result["dwtune"]] == ["prepare"]


@pytest.mark.parametrize(
    "entrypoint",
    [
        "dwtune prepare s.yaml && dwtune run s.yaml --storage /mnt/dwtune/experiments",
        "dwtune prepare s.yaml; dwtune run s.yaml --storage /mnt/dwtune/experiments",
    ],
)
def test_the_rendering_catches_an_entrypoint_that_kuberay_splits(tmp_path, entrypoint):
    """The form deploy/rayjob.yaml had before: only prepare is submitted; run executes in the
    submitter pod."""
    result = run_rayjob(_with_entrypoint(entrypoint), tmp_path)
    assert len(result["submits"]) == 1
    submitted = _ray_job_entrypoint(result["submits"][0]["argv"])
    assert "dwtune run" not in submitted
    assert [c["argv"][0] for c in result["dwtune"] if not c["in_job"]] == ["run"]


def test_the_rendered_line_is_kuberays_format():
    """Spot checks of the transcription against the shape job.go's comment documents."""
    command = kuberay_submitter_command(_with_entrypoint("python x.py"))
    assert command[:3] == ["/bin/bash", "-ce", "--"] and len(command) == 4
    line = command[3]
    assert re.search(
        rf"; if ! ray job status --address http://{re.escape(DASHBOARD_URL)} {JOB_ID} "
        r">/dev/null 2>&1 ; then ray job submit --address \S+ --no-wait --submission-id "
        rf"{JOB_ID} -- python x\.py ; fi ; ray job logs --address \S+ --follow {JOB_ID}$",
        line,
    ), line


# --------------------------------------------------------------------------- the CRD


def _strict(schema: dict) -> dict:
    """The CRD schema with unknown fields rejected, as `kubectl apply --validate=strict` (the
    API server's strict field validation) rejects them: every object that lists its properties
    and neither maps free keys nor preserves unknown fields gets additionalProperties: false."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


@pytest.fixture(scope="module")
def crd_validator():
    import jsonschema

    schema = _strict(json.loads(CRD_SCHEMA.read_text()))
    return jsonschema.Draft7Validator(schema)


def test_the_rayjob_validates_against_kuberays_v1_crd(crd_validator):
    job = _rayjob()
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in crd_validator.iter_errors(job)
    ]
    assert errors == []


def test_the_crd_check_rejects_a_misspelt_or_misplaced_field(crd_validator):
    job = _rayjob()
    for path, key in [(("spec", "rayClusterSpec"), "authOption"), (("spec",), "authOptions")]:
        broken = copy.deepcopy(job)
        node = broken
        for part in path:
            node = node[part]
        node[key] = {"mode": "token"}
        assert not crd_validator.is_valid(broken), (path, key)
    bad_mode = copy.deepcopy(job)
    bad_mode["spec"]["rayClusterSpec"]["authOptions"] = {"mode": "tokens"}
    assert not crd_validator.is_valid(bad_mode)


# --------------------------------------------------------------------------- token auth


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _containers_kuberay_gives_the_token(job: dict) -> list[tuple[str, dict]]:
    """The containers SetContainerTokenAuthEnvVars (common/pod.go) is applied to: the Ray
    container (index 0) of the head and of each worker group (common/pod.go, configureTokenAuth
    via DefaultHeadPodTemplate / DefaultWorkerPodTemplate) and the submitter
    (rayjob_controller.go, configureSubmitterContainer): KubeRay's default submitter, built
    from the head's image, or container 0 of spec.submitterPodTemplate."""
    cluster = job["spec"]["rayClusterSpec"]
    found = [("head", cluster["headGroupSpec"]["template"]["spec"]["containers"][0])]
    for group in cluster.get("workerGroupSpecs", []):
        found.append((group["groupName"], group["template"]["spec"]["containers"][0]))
    template = job["spec"].get("submitterPodTemplate")
    submitter = template["spec"]["containers"][0] if template else {"name": "ray-job-submitter"}
    found.append(("submitter", submitter))
    return found


def _env_after_kuberay(container: dict, auth: dict) -> dict[str, dict]:
    """SetContainerTokenAuthEnvVars without K8s token auth: RAY_AUTH_MODE=token and
    RAY_AUTH_TOKEN from the Secret (authOptions.secretName, else the one KubeRay generates,
    named after the RayCluster, key auth_token), each only where the container does not set
    that variable itself (utils.EnvVarExists): a variable in the manifest wins."""
    env = {e["name"]: e for e in container.get("env", [])}
    env.setdefault("RAY_AUTH_MODE", {"name": "RAY_AUTH_MODE", "value": "token"})
    secret = auth.get("secretName") or "<the RayCluster's name>"
    ref = {"secretKeyRef": {"name": secret, "key": "auth_token"}}
    env.setdefault("RAY_AUTH_TOKEN", {"name": "RAY_AUTH_TOKEN", "valueFrom": ref})
    return env


def test_the_rayjobs_cluster_and_submitter_use_token_auth():
    job = _rayjob()
    cluster = job["spec"]["rayClusterSpec"]
    auth = cluster.get("authOptions") or {}
    # utils.IsAuthEnabled: Mode == "token"; the CRD has no default, so it must be written.
    assert auth.get("mode") == "token", "rayClusterSpec.authOptions.mode is not token"
    # utils/validation.go: ValidateRayJobSpec refuses K8s token auth for a RayJob;
    # ValidateRayClusterSpec needs rayVersion >= 2.52.0 for token mode.
    assert not auth.get("enableK8sTokenAuth")
    assert _version(cluster["rayVersion"]) >= (2, 52, 0)
    for name, container in _containers_kuberay_gives_the_token(job):
        env = _env_after_kuberay(container, auth)
        assert env["RAY_AUTH_MODE"].get("value") == "token", name
        token = env["RAY_AUTH_TOKEN"]
        assert "secretKeyRef" in token.get("valueFrom", {}), f"{name}: a token not from a Secret"
