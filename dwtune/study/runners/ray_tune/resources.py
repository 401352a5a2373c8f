"""Whether some node of the cluster can hold one trial (checked before any trial starts)."""

from __future__ import annotations

from pathlib import Path

import ray
import yaml

from dwtune.core.errors import InputError
from dwtune.core.spec import ExperimentSpec

# A cluster-launcher head keeps the autoscaler config here (node types not yet started).
BOOTSTRAP_CONFIG = Path("~/ray_bootstrap_config.yaml")


# --------------------------------------------------------------------------- resources


def _node_types_from_bootstrap() -> list[dict]:
    """Resources of the autoscaler's node types, when this is a cluster-launcher head."""
    path = BOOTSTRAP_CONFIG.expanduser()
    if not path.exists():
        return []
    config = yaml.safe_load(path.read_text()) or {}
    types = config.get("available_node_types") or {}
    return [dict(t.get("resources") or {}) for t in types.values()]


def unsatisfiable(cpu: float, gpu: float, offers: list[dict]) -> bool:
    """True when no node (or autoscaler node type) offers ``cpu`` CPUs and ``gpu`` GPUs."""
    return not any(o.get("CPU", 0) >= cpu and o.get("GPU", 0) >= gpu for o in offers)


def check_resources(spec: ExperimentSpec) -> None:
    """Refuse at once a trial size no node can ever hold (Tune would leave it PENDING)."""
    cpu, gpu = spec.resources.cpu, spec.resources.gpu
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if not unsatisfiable(cpu, gpu, nodes + _node_types_from_bootstrap()):
        return
    largest = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
    raise InputError(
        f"resources: each trial asks for cpu={cpu:g}, gpu={gpu:g} but no node of this Ray "
        f"cluster offers that (largest: CPU={largest.get('CPU', 0):g}, "
        f"GPU={largest.get('GPU', 0):g}); lower resources.cpu/resources.gpu in the spec or "
        f"join a cluster with such nodes (--address)"
    )
