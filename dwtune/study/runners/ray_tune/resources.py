"""What the cluster offers: whether some node can hold one trial (checked before any trial
starts), how many sharded jobs it may hold at once, and where a sharded job's workers go."""

from __future__ import annotations

from pathlib import Path

import ray
import yaml

from dwtune.core.errors import InputError
from dwtune.core.spec import ExperimentSpec

# A cluster-launcher head keeps the autoscaler config here (node types not yet started).
BOOTSTRAP_CONFIG = Path("~/ray_bootstrap_config.yaml")


# --------------------------------------------------------------------------- resources


def _bootstrap_types() -> list[dict]:
    """The autoscaler's node types (each with ``resources`` and ``max_workers``), when this is
    a cluster-launcher head."""
    path = BOOTSTRAP_CONFIG.expanduser()
    if not path.exists():
        return []
    config = yaml.safe_load(path.read_text()) or {}
    return [dict(t or {}) for t in (config.get("available_node_types") or {}).values()]


def _node_types_from_bootstrap() -> list[dict]:
    """Resources of the autoscaler's node types, when this is a cluster-launcher head."""
    return [dict(t.get("resources") or {}) for t in _bootstrap_types()]


def node_offers() -> list[dict]:
    """What one node offers, for every alive node and every autoscaler node type."""
    alive = [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]
    return alive + _node_types_from_bootstrap()


def autoscaler_capacity(types: list[dict]) -> dict[str, float]:
    """Resources of the autoscaler's node types at their ``max_workers`` each: the most the
    cluster may hold once scaled up (the head is counted among the alive nodes)."""
    total: dict[str, float] = {}
    for node_type in types:
        count = float(node_type.get("max_workers") or 0)
        for key, amount in (node_type.get("resources") or {}).items():
            total[key] = total.get(key, 0.0) + count * float(amount)
    return total


def cluster_capacities() -> list[dict[str, float]]:
    """The cluster's resources now, and what the autoscaler could grow it to (if a head)."""
    return [dict(ray.cluster_resources()), autoscaler_capacity(_bootstrap_types())]


def placement_strategy(workers: int, cpu: float, gpu: float, offers: list[dict]) -> str:
    """Ray Train's placement of a job of ``workers`` workers (``cpu`` CPUs, ``gpu`` GPUs each):
    ``STRICT_PACK`` (every worker on one node, so NCCL stays on the node's NVLink) when some
    node, alive or an autoscaler node type, holds all of them; else ``PACK`` (as few nodes as
    Ray can, spanning nodes). A job no single node holds would wait forever under
    STRICT_PACK."""
    need = {"CPU": workers * cpu, "GPU": workers * gpu}
    if unsatisfiable(need["CPU"], need["GPU"], offers):
        return "PACK"
    return "STRICT_PACK"


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
