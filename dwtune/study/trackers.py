"""Experiment trackers (W&B, MLflow): which ones a study logs to, where, how its runs are named
and grouped, and the runs dwtune logs itself once the refine and fit stages are done.

Every trial is logged by Ray Tune's own callbacks (``WandbLoggerCallback``,
``MLflowLoggerCallback``; :mod:`dwtune.study.runners.ray_tune.trackers` attaches them), one
tracker run per Tune trial, named as the trial (``L6_w256_s0_1a2b3c``) and grouped by
:func:`run_group`: ``<stage>[/<pair>]/<cell>``, so the seeds of one cell share a group (a W&B
group; MLflow tags ``dwtune.group``, ``dwtune.stage``, ``dwtune.pair``, ``dwtune.cell``). After
the fit stage each refined pair's decisions are one more run (``refine/<pair>/decisions``) and
the fit another (``fit``, with fit.json, projections.parquet and report.md as its artifacts).
See docs/artifacts.md, "Experiment trackers (W&B, MLflow)".
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from collections.abc import Iterable
from pathlib import Path

from dwtune.core.errors import InputError
from dwtune.core.records import TrialRequest
from dwtune.core.spec import ExperimentSpec
from dwtune.core.spec.sections import TRACKERS
from dwtune.core.vocabulary import (
    PAIR_DELTAS_FILE,
    PROJECTIONS_FILE,
    REPORT_FILE,
    TRANSITIONS_FILE,
)
from dwtune.storage.experiment import ExperimentReader

WANDB, MLFLOW = TRACKERS
# the module each tracker's extra installs (mlflow-skinny installs `mlflow`)
MODULES = {WANDB: "wandb", MLFLOW: "mlflow"}
FIT_RUN = "fit"
DECISIONS_RUN = "decisions"
FIT_ARTIFACTS = ("fit.json", PROJECTIONS_FILE, REPORT_FILE)
# fit.json's numbers logged as the fit run's metrics
FIT_METRICS = ("a", "b", "se_a", "se_b", "r2", "chi2_red", "n_points")
TAG = "dwtune."  # prefix of the MLflow tags dwtune sets


def parse_log_to(values: Iterable[str], field: str = "--log-to") -> tuple[str, ...]:
    """Tracker names from ``--log-to`` values (each a name or a comma list), in order, once."""
    names: list[str] = []
    for value in values:
        for name in (part.strip().lower() for part in value.split(",")):
            if name and name not in TRACKERS:
                raise InputError(
                    f"{field}: got {name!r}; expected {' or '.join(TRACKERS)} (repeat the "
                    f"flag or give a comma list: {field} wandb,mlflow)"
                )
            if name and name not in names:
                names.append(name)
    return tuple(names)


def check_extra(name: str, field: str = "--log-to") -> None:
    """One line naming the extra to install when ``name``'s package is missing."""
    if importlib.util.find_spec(MODULES[name]) is None:
        raise InputError(f"{field} {name} needs the {name} extra; pip install 'dwtune[{name}]'")


@dataclasses.dataclass(frozen=True)
class Trackers:
    """The trackers of one study, resolved on the driver (absolute paths: Tune changes trial
    working directories). ``project``: the W&B project and the MLflow experiment name;
    ``wandb_dir``: where W&B writes its ``wandb/`` folder; ``mlflow_uri``: MLflow's tracking URI."""

    names: tuple[str, ...]
    project: str
    wandb_dir: str
    mlflow_uri: str

    @classmethod
    def resolve(
        cls, spec: ExperimentSpec, root: Path, log_to: Iterable[str] = ()
    ) -> Trackers | None:
        """The spec's ``trackers.log_to`` and ``log_to`` (``--log-to``) for the experiment in
        ``root``; None when there are none. A missing extra is one line, before anything runs."""
        asked = {name: "--log-to" for name in parse_log_to(log_to)}
        for name in spec.trackers.log_to:
            asked.setdefault(name, "trackers.log_to")
        for name, field in asked.items():
            check_extra(name, field)
        if not asked:
            return None
        root = Path(root).expanduser().resolve()
        uri = spec.trackers.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI")
        return cls(
            names=tuple(name for name in TRACKERS if name in asked),
            project=spec.trackers.project or spec.name,
            wandb_dir=str(Path(os.environ.get("WANDB_DIR") or root).expanduser().resolve()),
            mlflow_uri=uri or (root / "mlruns").as_uri(),
        )

    def file_store(self) -> None:
        """MLflow 3 refuses its file store unless told: a ``file:`` URI (the default, in the
        experiment) is the user's choice, so dwtune tells it, unless the user set it."""
        if MLFLOW in self.names and self.mlflow_uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

    def log_stages(self, root: Path) -> None:
        """The refine decisions (one run per pair) and the fit (one run, with its files as
        artifacts) of the experiment in ``root``, to every tracker."""
        reader = ExperimentReader(root)
        pairs = _pair_runs(reader) if reader.has(TRANSITIONS_FILE) else []
        fit = reader.fit_record()
        files = [Path(root) / name for name in FIT_ARTIFACTS if (Path(root) / name).is_file()]
        if WANDB in self.names:
            _wandb_stages(self, pairs, fit, files)
        if MLFLOW in self.names:
            self.file_store()
            _mlflow_stages(self, pairs, fit, files)


# --------------------------------------------------------------------------- trial runs


def cell_label(request: TrialRequest) -> str:
    """The trial's cell: its shape (``L6_w256``), and its length factor in a length check."""
    label = f"L{request.shape.depth}_w{request.shape.width}"
    return label + (f"_x{request.length_factor:g}" if request.length_factor is not None else "")


def run_group(request: TrialRequest) -> str:
    """``<stage>[/<pair>]/<cell>``: the seeds (and searched rates) of one cell share it."""
    return "/".join(part for part in (request.stage, request.pair, cell_label(request)) if part)


def run_tags(request: TrialRequest) -> dict[str, str]:
    """The MLflow tags of a trial's run (W&B: its group, job type and tags)."""
    tags = {
        "group": run_group(request),
        "stage": request.stage,
        "pair": request.pair,
        "cell": cell_label(request),
        "seed": str(request.seed),
        "trial_id": request.trial_id,
    }
    return {TAG + key: value for key, value in tags.items() if value}


def run_config(request: TrialRequest) -> dict[str, object]:
    """A trial's parameters as the trackers show them (W&B config, MLflow params)."""
    shape, cell = request.shape, request.cell
    config: dict[str, object] = {
        "trial_id": request.trial_id,
        "stage": request.stage,
        "pair": request.pair,
        "round": request.round,
        "point_kind": request.point_kind,
        "depth": shape.depth,
        "width": shape.width,
        "heads": shape.heads,
        "budget": cell.budget,
        "size": cell.size,
        "seed": request.seed,
        "lr": request.lr,
        "length_factor": request.length_factor,
    }
    return {key: value for key, value in config.items() if value not in (None, "")}


# --------------------------------------------------------------------------- stage runs


def _numbers(row: dict) -> dict[str, float]:
    return {
        key: float(value)
        for key, value in row.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }


def _pair_runs(reader: ExperimentReader) -> list[tuple[str, dict, list[dict[str, float]]]]:
    """Each refined pair: ``(pair, its transitions row, its Δ rows by size)``."""
    transitions = reader.table(TRANSITIONS_FILE)
    deltas = reader.table(PAIR_DELTAS_FILE) if reader.has(PAIR_DELTAS_FILE) else None
    runs = []
    for row in transitions.to_dict("records"):
        pair = str(row["pair"])
        steps: list[dict[str, float]] = []
        if deltas is not None and len(deltas):
            mine = deltas[deltas["pair"].astype(str) == pair].sort_values("n")
            steps = [_numbers(r) for r in mine.to_dict("records")]
        runs.append((pair, row, steps))
    return runs


def _summary(row: dict) -> dict[str, object]:
    """A transitions row as a run summary: its numbers, its status and its statement."""
    keep = {key: row[key] for key in ("status", "statement") if isinstance(row.get(key), str)}
    return {**_numbers(row), **keep}


def _wandb_stages(trackers: Trackers, pairs, fit: dict, files: list[Path]) -> None:
    import wandb

    common = {"project": trackers.project, "dir": trackers.wandb_dir, "reinit": "create_new"}
    mode = os.environ.get("WANDB_MODE")
    if mode:
        common["mode"] = mode
    for pair, row, steps in pairs:
        group = f"refine/{pair}"
        run = wandb.init(name=f"{group}/{DECISIONS_RUN}", group=group, job_type="refine", **common)
        for step, numbers in enumerate(steps):
            run.log(numbers, step=step)
        run.summary.update(_summary(row))
        run.finish()
    run = wandb.init(name=FIT_RUN, group=FIT_RUN, job_type=FIT_RUN, **common)
    run.summary.update({**_numbers(fit), "status": str(fit.get("status", ""))})
    artifact = wandb.Artifact(FIT_RUN, type=FIT_RUN)
    for path in files:
        artifact.add_file(str(path))
    run.log_artifact(artifact)
    run.finish()


def _mlflow_stages(trackers: Trackers, pairs, fit: dict, files: list[Path]) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(trackers.mlflow_uri)
    found = client.get_experiment_by_name(trackers.project)
    experiment = found.experiment_id if found else client.create_experiment(trackers.project)

    def start(name: str, tags: dict[str, str]) -> str:
        tags = {TAG + key: value for key, value in tags.items()}
        return client.create_run(experiment, run_name=name, tags=tags).info.run_id

    for pair, row, steps in pairs:
        group = f"refine/{pair}"
        run_id = start(
            f"{group}/{DECISIONS_RUN}", {"group": group, "stage": "refine", "pair": pair}
        )
        for step, numbers in enumerate(steps):
            for key, value in numbers.items():
                client.log_metric(run_id, key, value, step=step)
        for key, number in _numbers(row).items():  # the pair's transitions row
            client.log_metric(run_id, "final/" + key, number)
        for key in ("status", "statement"):
            if isinstance(row.get(key), str):
                client.set_tag(run_id, TAG + key, row[key][:5000])  # MLflow's tag limit
        client.set_terminated(run_id)
    run_id = start(FIT_RUN, {"group": FIT_RUN, "stage": FIT_RUN})
    client.set_tag(run_id, TAG + "status", str(fit.get("status", "")))
    for key, value in _numbers({k: fit.get(k) for k in FIT_METRICS}).items():
        client.log_metric(run_id, key, value)
    for path in files:
        client.log_artifact(run_id, str(path))
    client.set_terminated(run_id)
