# syntax=docker/dockerfile:1
# dwtune on GPUs: Python 3.11, the CUDA build of the pinned torch, Ray, dwtune. One image for the
# Ray cluster launcher (cluster.yaml, `docker:`) and KubeRay (deploy/rayjob.yaml).
#
#   docker build -t ghcr.io/dwtune/dwtune:0.1.0-cu130 .
#   docker push ghcr.io/dwtune/dwtune:0.1.0-cu130
#
# Then make the package public (GitHub: the package's Package settings, Change visibility,
# Public): the cluster's hosts and Kubernetes nodes pull it with no credentials, and it holds
# only open-source code. A private registry instead: cluster.yaml's initialization_commands log
# in before the launcher pulls (see there), deploy/rayjob.yaml's pods need imagePullSecrets.
#
# Publishing under another name: change the tag here (the label below), in cluster.yaml
# (docker.image) and in deploy/rayjob.yaml (every image:); tests/study/test_cluster.py checks
# that the three agree. docs/gpu_cluster.md walks the whole first study.
#
# Reproducible: Ray is pinned here, torch and every other dependency by constraints.txt (the
# versions the test suite passes with); pin the base image by digest when publishing
# (docker buildx imagetools inspect python:3.11-slim-bookworm prints it).
# Slim: python:3.11-slim, no CUDA toolkit (the torch wheels bring their CUDA 13.0 runtime
# libraries as nvidia-* packages; the host brings the driver, >= 580 for CUDA 13.0), no compiler
# in the final stage, no pip cache.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# torch==2.13.0 as constraints.txt pins it, CUDA 13.0 build (PyTorch's default CUDA since 2.11;
# it runs on H100, H200 and A100).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu130
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY constraints.txt /tmp/constraints.txt
# Only torch's own pin here: the CUDA index need not hold the pinned versions of torch's
# dependencies, which the next step brings to their pins from PyPI.
RUN pip install --index-url ${TORCH_INDEX} "$(grep '^torch==' /tmp/constraints.txt)"
COPY pyproject.toml README.md /src/
COPY dwtune /src/dwtune
# boto3: the head's autoscaler starts and stops AWS nodes with it.
RUN pip install -c /tmp/constraints.txt "ray[default,tune]==2.60.0" boto3==1.44.18 /src \
    && python -c "import torch, ray, dwtune; assert torch.version.cuda, 'a CPU torch was installed'"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="dwtune" \
      org.opencontainers.image.description="Depth x width Transformer studies on Ray (torch 2.13.0, CUDA 13.0)" \
      org.opencontainers.image.ref.name="ghcr.io/dwtune/dwtune:0.1.0-cu130"
# What Ray's cluster launcher runs inside the container (ray 2.60, autoscaler/_private/
# command_runner.py): rsync copies files in (DockerCommandRunner.run_rsync_up); openssh-client
# gives the head's autoscaler, which runs in this container, the `ssh` and `rsync --rsh ssh` it
# reaches every worker host with (SSHCommandRunner.run, run_rsync_up): without it no worker
# ever joins. wget: KubeRay's probes.
RUN apt-get update \
    && apt-get install -y --no-install-recommends rsync openssh-client wget ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# A non-root user with uid 1000: the ubuntu user of the cluster's hosts, so files the launcher
# syncs from the host (the auth token) and files on the shared EFS root (chowned to 1000) are
# its own. ~/.ray exists and is the user's, so the token's bind mount does not make docker
# create it as root.
RUN useradd --uid 1000 --create-home --shell /bin/bash ray \
    && mkdir -p /home/ray/.ray /mnt/dwtune \
    && chmod 700 /home/ray/.ray \
    && chown ray:ray /home/ray/.ray /mnt/dwtune
COPY --from=build /opt/venv /opt/venv
COPY --chown=ray:ray search_spaces /opt/dwtune/search_spaces
# HOME: Ray's launcher reads the container's home from the image's environment (`docker
# inspect` .Config.Env, DockerCommandRunner.run_init), else takes /root, and bind-mounts
# cluster.yaml's file_mounts there: `~/.ray/auth_token` must land in the home of the user Ray
# runs as (Ray reads Path.home()/.ray/auth_token), not in /root, which that user cannot read.
# NVIDIA_*: the container runtime exposes the GPUs and the driver's compute libraries.
ENV HOME=/home/ray \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    RAY_USAGE_STATS_ENABLED=0
USER ray
WORKDIR /home/ray
CMD ["bash"]
