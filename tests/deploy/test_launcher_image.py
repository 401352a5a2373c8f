"""The Dockerfile's image under Ray's cluster launcher (cluster.yaml), read through Ray's own code.

No Docker here: the Dockerfile is parsed, and Ray 2.60's DockerCommandRunner and
SSHCommandRunner (ray/autoscaler/_private/command_runner.py) run against a fake process runner
that answers the few questions they ask a host (``docker inspect``, ``printenv HOME``) and
records every command they would run.

- Where the auth token lands: DockerCommandRunner.run_init takes the container's home from the
  image's environment (``docker inspect -f '{{json .Config.Env}}'``: the ENV lines; HOME if set,
  else "/root") and docker.py's docker_start_cmds bind-mounts each file_mounts target there.
  Ray, running as the image's user, reads ``Path.home()/.ray/auth_token``
  (ray/_private/authentication/authentication_token_setup.py, _get_default_token_path). The
  two must be the same file, in a directory the user owns.
- What the head container runs to reach workers: the head's autoscaler updates each worker with
  the same runners, over ``ssh`` and ``rsync --rsh ssh``: the image must install both.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

# python:3.11-slim-bookworm's own Config.Env (PATH, LANG, GPG_KEY, PYTHON_VERSION,
# PYTHON_SHA256) sets no HOME, and the image ships neither ssh nor rsync: only the Dockerfile's
# final stage can provide them.
BASE_IMAGE_ENV: list[str] = []
# Debian bookworm: the package that installs each program the launcher runs.
DEBIAN_PACKAGE = {"ssh": "openssh-client", "scp": "openssh-client", "rsync": "rsync"}


# --------------------------------------------------------------------------- the Dockerfile


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the final stage, continuation lines joined, comments dropped."""
    joined, current = [], ""
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.lstrip().startswith("#") and not current.strip():
            continue
        current += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            if current.strip():
                op, _, args = current.strip().partition(" ")
                joined.append((op.upper(), args.strip()))
            current = ""
    last_from = max(i for i, (op, _) in enumerate(joined) if op == "FROM")
    return joined[last_from:]


def _env(instructions) -> dict[str, str]:
    """The final stage's ENV (both the KEY=VALUE and the legacy KEY VALUE forms)."""
    env = dict(item.split("=", 1) for item in BASE_IMAGE_ENV)
    for op, args in instructions:
        if op != "ENV":
            continue
        words = shlex.split(args)
        if "=" not in words[0]:
            env[words[0]] = args.split(None, 1)[1]
        else:
            env.update(word.split("=", 1) for word in words)
    return env


def _shell_commands(instructions) -> list[list[str]]:
    """Each simple command of the final stage's RUN lines, as words."""
    commands = []
    for op, args in instructions:
        if op == "RUN":
            for part in re.split(r"&&|;|\|\|", args):
                if part.strip():
                    commands.append(shlex.split(part))
    return commands


def _user(instructions) -> str:
    users = [args.split(":")[0] for op, args in instructions if op == "USER"]
    assert users, "the image runs as root"
    return users[-1]


def _passwd_home(instructions, user: str) -> str:
    """The home useradd gives ``user``: --home-dir/-d, else /home/<user> (Debian's default)."""
    for words in _shell_commands(instructions):
        if words[0] == "useradd" and words[-1] == user:
            assert {"--create-home", "-m"} & set(words), "useradd without --create-home"
            for flag in ("--home-dir", "-d"):
                if flag in words:
                    return words[words.index(flag) + 1]
            return f"/home/{user}"
    raise AssertionError(f"no useradd for the image's user {user}")


def _owned_by(instructions, path: str, user: str) -> bool:
    """Whether a RUN line creates ``path`` and chowns it to ``user``."""
    commands = _shell_commands(instructions)
    made = any(w[0] == "mkdir" and path in w[1:] for w in commands)
    owned = any(
        w[0] == "chown" and path in w[2:] and w[1].split(":")[0] in (user, "1000") for w in commands
    )
    return made and owned


def _installed_packages(instructions) -> set[str]:
    packages = set()
    for words in _shell_commands(instructions):
        if words[:2] == ["apt-get", "install"]:
            packages |= {w for w in words[2:] if not w.startswith("-")}
    return packages


# --------------------------------------------------------------------------- Ray's runners


class FakeHost:
    """A process runner for Ray's command runners (check_call / check_output, as subprocess):
    it records each command and answers what the runners ask a host for."""

    DEVNULL = subprocess.DEVNULL
    PIPE = subprocess.PIPE

    def __init__(self, image_env: list[str], container_home: str):
        self.image_env = image_env
        self.container_home = container_home
        self.commands: list[list[str]] = []

    def check_call(self, cmd, *args, **kwargs):
        self.commands.append(list(cmd))
        return 0

    def check_output(self, cmd, *args, **kwargs):
        self.commands.append(list(cmd))
        remote = _remote(cmd)
        if "{{json .Config.Env}}" in remote:  # docker inspect of the image
            return json.dumps(self.image_env).encode()
        if "printenv HOME" in remote:  # docker exec into the running container
            return self.container_home.encode()
        if "command -v docker" in remote:
            return b"/usr/bin/docker"
        if "MemAvailable" in remote or "/proc/meminfo" in remote:
            return b"MemAvailable:   65536000 kB"
        return b""  # docker inspect of a container: not running yet


def _docker_runner(config: dict, host: FakeHost):
    from ray.autoscaler._private.command_runner import DockerCommandRunner

    runner = DockerCommandRunner(
        config["docker"],
        log_prefix="",
        node_id="i-0worker",
        provider=SimpleNamespace(),
        auth_config={**config["auth"], "ssh_private_key": "~/ray_bootstrap_key.pem"},
        cluster_name=config["cluster_name"],
        process_runner=host,
        use_internal_ip=True,
    )
    ssh = runner.ssh_command_runner
    ssh.ssh_ip = "10.0.0.2"  # a worker's address: no provider lookup
    ssh.ssh_control_path = None  # create no /tmp/ray_ssh_* folder on this machine
    return runner


def _remote(command: list[str]) -> str:
    """The command an ssh line runs on the host. With login shells (the launcher's default)
    the runner wraps it as ``bash --login -c -i '<quoted>'`` (command_runner.py,
    _with_interactive): unquote that."""
    words = shlex.split(command[-1])
    return words[0] if len(words) == 1 else command[-1]


def _cluster_config() -> dict:
    return yaml.safe_load((REPO / "cluster.yaml").read_text())


def _bind_mounts(docker_run: str) -> dict[str, str]:
    """host path -> container path of each ``-v`` of a ``docker run`` line."""
    words = shlex.split(docker_run.replace("(", " ").replace(")", " "))
    return dict(words[i + 1].split(":", 1) for i, w in enumerate(words) if w == "-v")


# --------------------------------------------------------------------------- tests


def test_the_auth_token_is_mounted_where_ray_in_the_container_reads_it(monkeypatch):
    from ray._private.authentication import authentication_token_setup

    instructions = _instructions()
    env = _env(instructions)
    user = _user(instructions)
    assert user not in ("root", "0")
    passwd_home = _passwd_home(instructions, user)
    # At run time docker sets HOME from the image's ENV, else from the user's passwd entry.
    runtime_home = env.get("HOME", passwd_home)
    config = _cluster_config()
    mounts = [target for target in config["file_mounts"] if "auth_token" in target]
    assert mounts, "cluster.yaml syncs no auth token to the nodes"

    host = FakeHost([f"{k}={v}" for k, v in env.items()], runtime_home)
    runner = _docker_runner(config, host)
    runner.run_init(as_head=True, file_mounts=config["file_mounts"], sync_run_yet=True)
    remote = [_remote(c) for c in host.commands]
    docker_runs = [c for c in remote if re.search(r"\bdocker run\b", c)]
    assert len(docker_runs) == 1, host.commands
    in_container = _bind_mounts(docker_runs[0])

    monkeypatch.setenv("HOME", runtime_home)
    reads = str(authentication_token_setup._get_default_token_path())
    for target in mounts:
        landed = next(dst for src, dst in in_container.items() if src.endswith("/" + target))
        assert landed == reads, (
            f"cluster.yaml's {target} is mounted at {landed}, but Ray running as {user} "
            f"(HOME={runtime_home}) reads {reads}"
        )
        assert landed.startswith(passwd_home.rstrip("/") + "/"), (landed, passwd_home)
        # the token's folder exists in the image and is the user's (else docker creates it,
        # as root, for the bind mount)
        assert _owned_by(instructions, str(Path(landed).parent), user), Path(landed).parent


def test_the_image_has_what_the_head_runs_to_reach_its_workers():
    """The head's autoscaler sets a worker up as `ray up` does: commands over ssh, file mounts
    with rsync over ssh. Every program that takes must come with the image."""
    instructions = _instructions()
    config = _cluster_config()
    host = FakeHost([], "/home/ray")
    runner = _docker_runner(config, host)
    runner.run("mkdir -p /mnt/dwtune/cache", run_env="host")  # a setup command
    runner.run_rsync_up("/home/ray/.ray/auth_token", "~/.ray/auth_token")  # a file mount
    programs = set()
    for command in host.commands:
        programs.add(Path(command[0]).name)
        if "--rsh" in command:
            programs.add(shlex.split(command[command.index("--rsh") + 1])[0])
    assert {"ssh", "rsync"} <= programs, programs
    missing = {DEBIAN_PACKAGE[p] for p in programs} - _installed_packages(instructions)
    assert not missing, f"the image does not install {sorted(missing)}"


def test_env_home_is_the_non_root_users_home_and_its_workdir():
    instructions = _instructions()
    user = _user(instructions)
    assert user not in ("root", "0")
    home = _env(instructions).get("HOME")
    assert home == _passwd_home(instructions, user), "ENV HOME is not the user's home"
    workdirs = [args for op, args in instructions if op == "WORKDIR"]
    assert workdirs and workdirs[-1] == home


@pytest.mark.parametrize("where", ["cluster.yaml", "deploy/rayjob.yaml"])
def test_nodes_can_pull_the_image(where):
    """Hosts pull the image with no credentials (a public package, the documented step), or
    log in to its registry before the launcher's pull (initialization_commands run first:
    ray/autoscaler/_private/updater.py, NodeUpdater.do_update), or, on Kubernetes, name
    imagePullSecrets."""
    text = (REPO / where).read_text()
    docs = (REPO / "docs" / "gpu_cluster.md").read_text()
    if where == "cluster.yaml":
        config = yaml.safe_load(text)
        image = config["docker"]["image"]
        logins = [c for c in config["initialization_commands"] if "docker login" in c]
    else:
        job = next(d for d in yaml.safe_load_all(text) if d["kind"] == "RayJob")
        cluster = job["spec"]["rayClusterSpec"]
        groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
        images = {c["image"] for g in groups for c in g["template"]["spec"]["containers"]}
        assert len(images) == 1
        image = images.pop()
        pull_secrets = [g["template"]["spec"].get("imagePullSecrets") for g in groups]
        logins = ["imagePullSecrets"] if all(pull_secrets) else []
    registry = image.split("/")[0]
    assert "." in registry, f"{image}: name the registry"
    if logins:
        assert all(registry in c for c in logins if "docker login" in c), (logins, registry)
        return
    # A public image: the walkthrough says how to make it public and how to check.
    assert re.search(r"[Cc]hange visibility.{0,40}Public", docs), "no make-public step"
    assert f"docker pull {image}" in docs and "docker logout" in docs
