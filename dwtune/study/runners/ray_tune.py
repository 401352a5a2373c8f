"""Trials on Ray Tune: the only module of dwtune that imports ray.

:class:`TuneRunner` starts Ray (a local instance sized to the machine, or joins a cluster),
checks that some node can hold one trial, and runs batches of trial requests as Ray Tune runs.
dwtune's own experiment store stays the source of truth (``Tuner.restore`` cannot add trials):
a Tune callback on the driver writes each trial's record the moment it finishes, so a killed
driver loses nothing finished and a rerun trains only what is missing. Every call of
:meth:`TuneRunner.run` is a fresh Tune experiment under ``<experiment>/ray/<stage>-<n>``, so the
refine stage can call it again and again while Ray stays up.

Inside a trial the trainer's ``report(metrics, checkpoint_dir)`` becomes
``ray.tune.report(metrics, checkpoint=...)``; a retried trial resumes from
``ray.tune.get_checkpoint()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import ray
from ray import tune
from ray._private import ray_constants

from dwtune.backends.trial import run_training
from dwtune.core import vocabulary
from dwtune.core.budget import flops_per_token
from dwtune.core.errors import InputError
from dwtune.core.records import TrialRecord, TrialRequest, record_from_result
from dwtune.core.spec import ExperimentSpec
from dwtune.outputs import tables
from dwtune.storage.store import ExperimentStore
from dwtune.study.progress import StudyProgress
from dwtune.study.runners import embedded_ray
from dwtune.study.runners.cluster_address import node_types_from_bootstrap, probe, unsatisfiable
from dwtune.study.runners.trial_errors import error_text, forget_pickled_error

# Keys a trial adds to its reports for the driver (not metrics; never in a curve).
NODE_KEY = "dwtune/node"
ATTEMPT_S_KEY = "dwtune/attempt_s"  # seconds since this attempt of the trial started
FINAL_KEY = "dwtune/final"  # set on the trial's last report, which carries the final status
STARTED_KEY = "dwtune/started"  # set on a report sent as an attempt starts (says where it runs)
# Keys of a report that belong in a trial's curve.
CURVE_KEYS = frozenset(
    {vocabulary.STEP, vocabulary.TOKENS, vocabulary.ELAPSED_S, *vocabulary.CURVE_SCALARS}
)

# Environment for Tune in the driver: no Tune console tables, no Tune-side CSV/JSON/TensorBoard
# loggers (dwtune writes its own event files; Tune's would show twice under `tb --logdir`),
# Ctrl-C raises KeyboardInterrupt at once instead of Tune's "resume with Tuner.restore" path.
QUIET_TUNE_ENV = {
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
    "TUNE_DISABLE_SIGINT_HANDLER": "1",
    "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",
}
# The embedded instance passes only specs and small dicts through the object store.
EMBEDDED_OBJECT_STORE_BYTES = 512 * 2**20


# --------------------------------------------------------------------------- inside a trial


def _node_label() -> str:
    """Hostname and Ray node id: several Ray nodes may share one host."""
    node_id = ray.get_runtime_context().get_node_id()
    return f"{socket.gethostname()}/{node_id[:12]}"


@contextlib.contextmanager
def _resume_dir() -> Iterator[str | None]:
    """Directory of the checkpoint this attempt resumes from, if Tune restored one."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        yield None
        return
    with checkpoint.as_directory() as path:
        yield path


def trial_main(config: dict, *, spec: ExperimentSpec, requests: dict[str, TrialRequest]) -> None:
    """The Tune function trainable: train one request, reporting through ``tune.report``."""
    request = requests[config["trial_id"]]
    start = time.perf_counter()
    node = _node_label()

    def extra() -> dict:
        return {NODE_KEY: node, ATTEMPT_S_KEY: time.perf_counter() - start}

    def report(values: dict, checkpoint_dir: str | None) -> None:
        # Tune copies the checkpoint to storage before report returns, so the trainer may
        # overwrite checkpoint_dir afterwards.
        checkpoint = tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        tune.report({**values, **extra()}, checkpoint=checkpoint)

    tune.report({**extra(), STARTED_KEY: True})
    with tempfile.TemporaryDirectory(prefix="dwtune-ckpt-") as scratch, _resume_dir() as resume:
        final = run_training(
            spec, request.shape, request.seed, report, checkpoint_dir=scratch, resume_from=resume
        )
    tune.report({**final, **extra(), FINAL_KEY: True})


# --------------------------------------------------------------------------- driver callback


@dataclasses.dataclass
class _TrialState:
    request: TrialRequest
    points: dict[int, dict] = dataclasses.field(default_factory=dict)  # step -> curve point
    final: dict = dataclasses.field(default_factory=dict)
    node: str = ""
    attempt_s: float = 0.0
    attempt_started: float = 0.0  # driver clock (monotonic s) when this attempt started
    earlier_attempts_s: float = 0.0  # seconds spent in attempts that failed and were retried
    attempt: int = 1
    announce_resume: bool = False  # say where a retried attempt picks up, at its first report
    writer: object = None

    @property
    def curve(self) -> list[dict]:
        return [self.points[step] for step in sorted(self.points)]

    @property
    def wall_time_s(self) -> float:
        return self.earlier_attempts_s + self.attempt_s

    def failed_attempt_s(self) -> float:
        """Seconds of an attempt that just failed: it ran past its last report until it died."""
        since_start = time.monotonic() - self.attempt_started if self.attempt_started else 0.0
        return max(self.attempt_s, since_start)


class RecordingCallback(tune.Callback):
    """Writes each trial's record (and its TensorBoard run) on the driver as it finishes."""

    def __init__(
        self,
        spec: ExperimentSpec,
        store: ExperimentStore,
        requests: dict[str, TrialRequest],
        progress: StudyProgress | None,
        tensorboard: bool,
    ):
        self.spec, self.store, self.requests = spec, store, requests
        self.progress, self.tensorboard = progress, tensorboard
        self.states: dict[str, _TrialState] = {}

    def _state(self, trial) -> _TrialState:
        trial_id = trial.config["trial_id"]
        if trial_id not in self.states:
            state = self.states[trial_id] = _TrialState(self.requests[trial_id])
            if self.tensorboard:  # a live view; rewritten from the record at the end
                simulated = self.spec.trainer == "simulated"
                path = tables.run_dir(self.store.root, state.request.name, simulated)
                shutil.rmtree(path, ignore_errors=True)  # left by an interrupted driver
                state.writer = tables.open_writer(path, simulated)
        return self.states[trial_id]

    def on_trial_start(self, iteration, trials, trial, **info):
        state = self._state(trial)
        state.attempt_started = time.monotonic()
        if self.progress:
            self.progress.trial_started(state.request)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        state = self._state(trial)
        state.node = result.get(NODE_KEY, state.node)
        state.attempt_s = float(result.get(ATTEMPT_S_KEY, state.attempt_s))
        if result.get(FINAL_KEY):
            state.final = dict(result)
            return
        if result.get(STARTED_KEY):
            return
        point = {k: v for k, v in result.items() if k in CURVE_KEYS or k == vocabulary.STATUS}
        if state.announce_resume:
            state.announce_resume = False
            self._note(
                f"  {state.request.name}: attempt {state.attempt} reports from "
                f"{vocabulary.STEP} {point.get(vocabulary.STEP)}"
            )
        # A retried attempt re-reports steps after its checkpoint: the latest report wins.
        state.points[int(point.get(vocabulary.STEP, len(state.points)))] = point
        if state.writer is not None:
            tables.add_point(state.writer, point)

    def on_trial_recover(self, iteration, trials, trial, **info):
        state = self._state(trial)
        state.earlier_attempts_s += state.failed_attempt_s()
        state.attempt_s = 0.0
        state.attempt_started = time.monotonic()
        state.attempt += 1
        state.announce_resume = True
        self._note(
            f"  {state.request.name}: attempt {state.attempt - 1} failed "
            f"({error_text(trial)}); retrying"
        )
        forget_pickled_error(trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        state = self._state(trial)
        if not state.final:
            self._finish(state, vocabulary.STATUS_FAILED, "the trial ended without a final result")
            return
        self._finish(state, state.final.get(vocabulary.STATUS, vocabulary.STATUS_FINISHED), "")

    def on_trial_error(self, iteration, trials, trial, **info):
        state = self._state(trial)
        state.attempt_s = state.failed_attempt_s()
        self._finish(state, vocabulary.STATUS_FAILED, error_text(trial))
        forget_pickled_error(trial)

    def on_step_end(self, iteration, trials, **info):
        if self.progress:
            self.progress.tick()

    def _note(self, message: str) -> None:
        if self.progress:
            self.progress.note(message)

    def _finish(self, state: _TrialState, status: str, error: str) -> None:
        record = record_from_result(
            state.request,
            self.spec,
            state.curve,
            status,
            state.wall_time_s,
            node=state.node,
            error=error,
        )
        self.store.write_record(record)  # first: the result is safe before anything else
        if state.writer is not None:
            state.writer.close()
            tables.write_trial_board(self.store.root, state.request.name, record)
        if self.progress:
            self.progress.trial_finished(state.request, record)


# --------------------------------------------------------------------------- resources


def check_resources(spec: ExperimentSpec) -> None:
    """Refuse at once a trial size no node can ever hold (Tune would leave it PENDING)."""
    cpu, gpu = spec.resources.cpu, spec.resources.gpu
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if not unsatisfiable(cpu, gpu, nodes + node_types_from_bootstrap()):
        return
    largest = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
    raise InputError(
        f"resources: each trial asks for cpu={cpu:g}, gpu={gpu:g} but no node of this Ray "
        f"cluster offers that (largest: CPU={largest.get('CPU', 0):g}, "
        f"GPU={largest.get('GPU', 0):g}); lower resources.cpu/resources.gpu in the spec or "
        f"join a cluster with such nodes (--address)"
    )


# --------------------------------------------------------------------------- connecting


def _is_local(address: str | None) -> bool:
    return address in (None, "", "local")


_CLUSTER_MODE_AT_IMPORT = ray_constants.ENABLE_RAY_CLUSTER


def _single_machine(on: bool) -> None:
    """Ray's single-machine mode keeps a loopback node address as it is. Ray read this
    constant at import; its child processes read the environment (see embedded_ray)."""
    ray_constants.ENABLE_RAY_CLUSTER = False if on else _CLUSTER_MODE_AT_IMPORT


def _init_ray(address: str | None) -> None:
    common = {"log_to_driver": False, "logging_level": logging.ERROR}
    if _is_local(address):
        _single_machine(True)
        logging.getLogger("ray._private.authentication").setLevel(logging.ERROR)
        ray.init(
            address="local",
            object_store_memory=EMBEDDED_OBJECT_STORE_BYTES,
            **embedded_ray.init_options(),
            **common,
        )
        return
    if address != "auto":
        probe(address)
    try:
        ray.init(address=address, **common)
    except ray.exceptions.AuthenticationError as exc:
        raise InputError(
            f"--address {address}: the cluster requires a token ({str(exc).splitlines()[0]}); "
            f"set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or ~/.ray/auth_token)"
        ) from None
    except ConnectionError as exc:
        raise InputError(
            f"--address {address}: {str(exc).splitlines()[0]}; if the cluster uses token "
            f"authentication, set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or ~/.ray/auth_token)"
        ) from None


def trial_spec(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec trials receive: data paths made absolute (Tune changes trials' cwd)."""
    from dwtune.backends.pytorch.data import resolve_data_config

    return dataclasses.replace(spec, data=resolve_data_config(spec.data))


# --------------------------------------------------------------------------- the runner


class TuneRunner:
    """Ray for the lifetime of a ``with`` block; :meth:`run` trains batches of requests."""

    def __init__(
        self,
        spec: ExperimentSpec,
        store: ExperimentStore,
        *,
        address: str | None = None,
        progress: StudyProgress | None = None,
    ):
        self.spec, self.store, self.progress = spec, store, progress
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.trial_spec = trial_spec(spec)
        self.tensorboard = tables.tensorboard_problem() is None
        self._failed_here: set[str] = set()  # failed in this driver: not retried again here
        self._corpus_ready = False

    # ------------------------------------------------------------------ lifetime

    def __enter__(self) -> TuneRunner:
        self._prepare_corpus()  # a bad corpus fails here, in seconds, before Ray starts
        # An enclosing runner (or a notebook) may have Ray up already: use it, leave it up.
        self._owns_ray = not ray.is_initialized()
        env: dict[str, str | None] = dict(QUIET_TUNE_ENV)
        if self._owns_ray and _is_local(self.address):
            env.update(embedded_ray.environment())  # loopback only, random token
        self._saved_env = {key: os.environ.get(key) for key in env}
        embedded_ray.set_env(env)
        logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
        if self._owns_ray:
            _init_ray(self.address)
        try:
            check_resources(self.spec)
            self._say_where()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        if self._owns_ray:
            ray.shutdown()
            _single_machine(False)
        embedded_ray.set_env(self._saved_env)

    def _say_where(self) -> None:
        if not self.progress:
            return
        resources = ray.cluster_resources()
        self.progress.note(
            f"Ray: {len([n for n in ray.nodes() if n.get('Alive')])} node(s), "
            f"{resources.get('CPU', 0):g} CPU, {resources.get('GPU', 0):g} GPU; each trial "
            f"uses {self.spec.resources.cpu:g} CPU, {self.spec.resources.gpu:g} GPU"
        )
        problem = tables.tensorboard_problem()
        self.progress.note(problem or f"TensorBoard: tensorboard --logdir {self.store.root}")

    # ------------------------------------------------------------------ batches

    def _reusable(self, request: TrialRequest) -> TrialRecord | None:
        """The recorded result of ``request``; a failure from an earlier driver is retried."""
        record = self.store.read_record(request.trial_id)
        if record is None:
            return None
        if record.status == vocabulary.STATUS_FAILED and request.trial_id not in self._failed_here:
            return None
        return record

    def run(self, requests: list[TrialRequest]) -> list[TrialRecord]:
        """Records for ``requests`` (same order); only those not yet recorded are trained."""
        reused = {r.trial_id: rec for r in requests if (rec := self._reusable(r)) is not None}
        todo = list({r.trial_id: r for r in requests if r.trial_id not in reused}.values())
        stage = requests[0].stage if requests else "grid"
        if self.progress:
            costs = {r.trial_id: self._cost(r) for r in todo}
            self.progress.begin(stage, todo, list(reused.values()), costs)
        if todo:
            self._fit(stage, todo)
            if self.progress:
                self.progress.end()
        return [reused.get(r.trial_id) or self._recorded(r) for r in requests]

    def _cost(self, request: TrialRequest) -> float:
        """Expected training time, up to a factor: FLOPs per token (every trial of a spec
        trains the same tokens); the simulated backend spends the same time on every shape."""
        return 1.0 if self.spec.trainer == "simulated" else flops_per_token(request.shape)

    def _recorded(self, request: TrialRequest) -> TrialRecord:
        record = self.store.read_record(request.trial_id)
        if record is None:  # Tune ended without telling the callback: say so, never hide it
            record = record_from_result(
                request,
                self.spec,
                [],
                vocabulary.STATUS_FAILED,
                0.0,
                error="Ray Tune returned no result for this trial",
            )
            self.store.write_record(record)
        if record.status == vocabulary.STATUS_FAILED:
            self._failed_here.add(request.trial_id)
        return record

    def _prepare_corpus(self) -> None:
        """Tokenize once on the driver, so concurrent trials find the cache ready."""
        if self._corpus_ready or self.spec.trainer != "torch":
            return
        from dwtune.backends.pytorch.data import prepare_corpus

        prepare_corpus(self.trial_spec.data)
        self._corpus_ready = True

    def _experiment_name(self, stage: str) -> str:
        """``<stage>-<n>``: a new Tune experiment per call, never a stale one restored."""
        ray_dir = self.store.root / "ray"
        taken = [p.name for p in ray_dir.glob(f"{stage}-*")] if ray_dir.exists() else []
        numbers = [int(n.rsplit("-", 1)[1]) for n in taken if n.rsplit("-", 1)[1].isdigit()]
        return f"{stage}-{max(numbers, default=0) + 1:03d}"

    def _fit(self, stage: str, todo: list[TrialRequest]) -> None:
        self._prepare_corpus()
        # Costliest first: the long trials do not end up alone at the end while slots idle.
        todo = sorted(todo, key=self._cost, reverse=True)
        by_id = {r.trial_id: r for r in todo}
        callback = RecordingCallback(self.spec, self.store, by_id, self.progress, self.tensorboard)
        name = self._experiment_name(stage)
        tuner = tune.Tuner(
            self._trainable(by_id),
            param_space={"trial_id": tune.grid_search(list(by_id))},
            tune_config=tune.TuneConfig(
                max_concurrent_trials=self.spec.resources.max_concurrent,
                trial_name_creator=lambda trial: by_id[trial.config["trial_id"]].name,
                trial_dirname_creator=lambda trial: by_id[trial.config["trial_id"]].name,
                # Reusing a CPU trial's worker saves its start-up (~1 s); GPU trials get a
                # fresh process so CUDA memory is returned between trials.
                reuse_actors=self.spec.resources.gpu == 0,
            ),
            run_config=tune.RunConfig(
                name=name,
                storage_path=str(self.store.root / "ray"),
                verbose=0,
                callbacks=[callback],
                failure_config=tune.FailureConfig(max_failures=self.spec.resources.retries),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            ),
        )
        tuner.fit()
        _drop_checkpoints(self.store.root / "ray" / name)

    def _trainable(self, by_id: dict[str, TrialRequest]):
        trainable = tune.with_parameters(trial_main, spec=self.trial_spec, requests=by_id)
        resources = {"cpu": self.spec.resources.cpu, "gpu": self.spec.resources.gpu}
        return tune.with_resources(trainable, resources)


def _drop_checkpoints(run_dir: Path) -> None:
    """Checkpoints only serve retries; once a batch is recorded they are dead weight (GBs)."""
    for path in run_dir.glob("*/checkpoint_*"):
        shutil.rmtree(path, ignore_errors=True)
