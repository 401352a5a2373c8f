"""The Ray Tune runner: Ray for the lifetime of a ``with`` block, one Tune run per batch.

See the package docstring (:mod:`dwtune.study.runners.ray_tune`) for what it keeps where.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
from pathlib import Path

import ray
from ray import tune
from ray._private import ray_constants

from dwtune.core import vocabulary
from dwtune.core.cost import relative_trial_cost
from dwtune.core.errors import InputError
from dwtune.core.records import TrialRecord, TrialRequest, record_from_result
from dwtune.core.sharding import fused_seeds, sharded_concurrency, trial_workers
from dwtune.core.spec import ExperimentSpec
from dwtune.outputs import tensorboard
from dwtune.storage.store import ExperimentStore, user_write_error
from dwtune.study.feed import RequestFeed
from dwtune.study.fusion import fused_groups
from dwtune.study.planning import gpu_memory_bytes
from dwtune.study.progress import StudyProgress
from dwtune.study.runners.base import reusable_record, reusable_records
from dwtune.study.runners.cluster_address import check_joinable, given_address
from dwtune.study.runners.ray_tune import actor_reuse, embedded_ray, raylet_errors
from dwtune.study.runners.ray_tune.asha import CellASHA
from dwtune.study.runners.ray_tune.checkpoints import remove_train_dir
from dwtune.study.runners.ray_tune.early_stop import PairPointStopper, early_stop_summary
from dwtune.study.runners.ray_tune.feed_searcher import REQUEST_KEY, FeedSearcher
from dwtune.study.runners.ray_tune.reaper import Reaper
from dwtune.study.runners.ray_tune.recorder import RecordingCallback
from dwtune.study.runners.ray_tune.resources import (
    check_resources,
    cluster_capacities,
    node_offers,
    unsatisfiable,
)
from dwtune.study.runners.ray_tune.trackers import tracker_callbacks
from dwtune.study.runners.ray_tune.trial import FUSED_KEY, WORKERS_KEY, trial_main
from dwtune.study.trackers import Trackers

# CPUs of a sharded trial's Tune function, which only waits on its Ray Train job.
DRIVER_CPU = 0.01

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
# Trials Tune queues ahead from the feed's searcher (its default for a custom searcher is 1).
FEED_PENDING_TRIALS = 64


# --------------------------------------------------------------------------- connecting


def _is_local(address: str | None) -> bool:
    return address in (None, "", "local")


_CLUSTER_MODE_AT_IMPORT = ray_constants.ENABLE_RAY_CLUSTER


def _single_machine(on: bool) -> None:
    """Ray's single-machine mode keeps a loopback node address as it is. Ray read this
    constant at import; its child processes read the environment (see embedded_ray)."""
    ray_constants.ENABLE_RAY_CLUSTER = False if on else _CLUSTER_MODE_AT_IMPORT


def _init_ray(address: str | None, named: str = "--address") -> None:
    """Start the embedded instance, or join the cluster at ``address`` once it has answered
    as one (``named``: where the address came from, for the error line)."""
    common = {"log_to_driver": False, "logging_level": logging.ERROR}
    raylet_errors.install()  # before ray.init starts the thread that prints them
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
    if address != "auto":  # the commands checked it already; a library caller has not
        check_joinable(address, named)
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


def _move_to(folder: Path) -> str | None:
    """Work in ``folder`` while Ray runs: the experiment's own, which outlives the run (its
    ray/ is removed once empty). Returns the directory left, or None where it was gone.

    Why: Tune resolves paths against the working directory (its results listing calls
    os.getcwd()), so a working directory removed during a run ended it in a traceback after
    training. Every path dwtune passes on is absolute, and Ray started here keeps its
    processes' working directory here too."""
    try:
        left = os.getcwd()
    except FileNotFoundError:
        left = None
    folder.mkdir(parents=True, exist_ok=True)
    os.chdir(folder)
    return left


def trial_spec(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec trials receive: data paths made absolute (Tune changes trials' cwd)."""
    from dwtune.backends.data import resolve_data_config

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
        trackers: Trackers | None = None,
    ):
        self.spec, self.store, self.progress = spec, store, progress
        self.trackers = trackers  # W&B, MLflow: Tune's callbacks on every run (trackers.py)
        self.address, self.address_named = given_address(address)
        self.trial_spec = trial_spec(spec)
        # Tune changes trials' working dirs: trials find their checkpoints by absolute path
        self.experiment_root = str(Path(store.root).expanduser().resolve())
        self.tensorboard = tensorboard.tensorboard_problem() is None
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
        self._reaper: Reaper | None = None
        self._saved_cwd: str | None = None
        try:  # a refused start restores the environment too (a notebook or test goes on)
            self._saved_cwd = _move_to(self.store.root)
            if self._owns_ray:
                if _is_local(self.address):  # its processes end if this one is killed
                    self._reaper = Reaper()
                _init_ray(self.address, self.address_named)
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
        if self._reaper is not None:
            self._reaper.stop()
        embedded_ray.set_env(self._saved_env)
        if self._saved_cwd is not None:
            with contextlib.suppress(OSError):  # removed meanwhile: stay where Ray ran
                os.chdir(self._saved_cwd)

    def _say_where(self) -> None:
        if not self.progress:
            return
        resources = ray.cluster_resources()
        self.progress.note(
            f"Ray: {len([n for n in ray.nodes() if n.get('Alive')])} node(s), "
            f"{resources.get('CPU', 0):g} CPU, {resources.get('GPU', 0):g} GPU; each trial "
            f"uses {self.spec.resources.cpu:g} CPU, {self.spec.resources.gpu:g} GPU"
            + (
                f" per worker, up to {self.spec.resources.workers_per_trial} workers"
                if self.spec.resources.workers_per_trial > 1
                else ""
            )
        )
        problem = tensorboard.tensorboard_problem()
        self.progress.note(problem or f"TensorBoard: tensorboard --logdir {self.store.root}")

    # ------------------------------------------------------------------ batches

    def run(self, requests: list[TrialRequest], *, scheduler: object = None) -> list[TrialRecord]:
        """Records for ``requests`` (same order); only those not yet recorded are trained.
        ``scheduler``: a Tune trial scheduler that may stop trials early (the lr search's)."""
        reused = reusable_records(self.store, requests, self._failed_here)
        todo = list({r.trial_id: r for r in requests if r.trial_id not in reused}.values())
        self._remove_recorded_checkpoints(reused)  # a driver stopped before it removed them
        stage = requests[0].stage if requests else vocabulary.Stage.GRID
        if self.progress:
            costs = {r.trial_id: self._cost(r) for r in todo}
            self.progress.begin(stage, todo, list(reused.values()), costs)
        if todo:
            self._fit(stage, todo, scheduler)
            if self.progress:
                self.progress.end()
        return [reused.get(r.trial_id) or self._recorded(r) for r in requests]

    def _cost(self, request: TrialRequest) -> float:
        return relative_trial_cost(self.spec.trainer, request.shape)

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
        from dwtune.backends.data import prepare_corpus

        say = {"say": self.progress.note} if self.progress else {}  # else on stderr
        prepare_corpus(self.trial_spec.data, progress=None, **say)  # bars on a terminal only
        self._corpus_ready = True

    def _experiment_name(self, stage: str) -> str:
        """``<stage>-<n>``: a new Tune experiment per call, never a stale one restored (a driver
        killed mid-batch leaves its run folder; the next batch takes the next number)."""
        ray_dir = self.store.root / vocabulary.RAY_DIR
        taken = [p.name for p in ray_dir.glob(f"{stage}-*")] if ray_dir.exists() else []
        numbers = [int(n.rsplit("-", 1)[1]) for n in taken if n.rsplit("-", 1)[1].isdigit()]
        return f"{stage}-{max(numbers, default=0) + 1:03d}"

    def run_lr_search(self, requests: list[TrialRequest]) -> list[TrialRecord]:
        """Records of ``lr_search`` requests, trained under one ASHA scheduler per cell (see
        :class:`~.asha.CellASHA`): the rates of one cell compete, cells never do."""
        return self.run(requests, scheduler=CellASHA(requests, self.spec))

    def _fit(self, stage: str, todo: list[TrialRequest], scheduler: object = None) -> None:
        """Sharded trials in a Tune run of their own, then the one-process ones in another:
        the sharded run is capped to the jobs the cluster can hold, which must not cap the
        one-process trials (each holds its own resources, and Tune fits as many as there are)."""
        self._prepare_corpus()
        workers = self._workers(todo)
        sharded = [r for r in todo if workers[r.trial_id] > 1]
        plain = [r for r in todo if workers[r.trial_id] == 1]
        if sharded:  # the costliest first
            sharded_workers = {r.trial_id: workers[r.trial_id] for r in sharded}
            self._fit_batch(stage, sharded, sharded_workers, scheduler)
        if plain:
            # seeds of one training share a trial (a cell's, in the grid); not under a
            # scheduler that stops trials one by one (the lr search's ASHA)
            fused = self._fused(plain) if scheduler is None else {}
            self._fit_batch(stage, plain, {r.trial_id: 1 for r in plain}, scheduler, fused)

    def _placeable(self):
        """``k -> bool``: whether some node holds a trial of k fused seeds' resources (the
        nodes asked once, at the first question: a batch without seeds to fuse asks none)."""
        offers: list[list[dict]] = []
        resources = self.spec.resources

        def fits(k: int) -> bool:
            if not offers:
                offers.append(node_offers())
            return not unsatisfiable(k * resources.cpu, min(k * resources.gpu, 1.0), offers[0])

        return fits

    def _fused(self, requests: list[TrialRequest]) -> dict[str, list[TrialRequest]]:
        """The batch's fused trials: first seed's trial id -> the seeds it carries
        (:func:`~dwtune.study.fusion.fused_groups`), each within what one node offers."""
        gpu_bytes = gpu_memory_bytes(self.spec, None)
        groups = fused_groups(self.spec, requests, gpu_bytes, self._placeable())
        return {group[0].trial_id: group for group in groups if len(group) > 1}

    def _fit_batch(
        self,
        stage: str,
        todo: list[TrialRequest],
        workers: dict[str, int],
        scheduler: object = None,
        fused: dict[str, list[TrialRequest]] | None = None,
    ) -> None:
        # Costliest first: the long trials do not end up alone at the end while slots idle.
        todo = sorted(todo, key=self._cost, reverse=True)
        by_id = {r.trial_id: r for r in todo}
        fused = fused or {}
        carried = {r.trial_id for group in fused.values() for r in group[1:]}
        callback = RecordingCallback(
            self.spec,
            self.store,
            by_id,
            self.progress,
            self.tensorboard,
            stopped_early=scheduler is not None,
            fused=fused,
        )
        self._tune(
            stage,
            callback,
            by_id,
            workers,
            param_space={"trial_id": tune.grid_search([i for i in by_id if i not in carried])},
            scheduler=scheduler,
            fused=fused,
        )

    def run_feed(self, feed: RequestFeed) -> None:
        """Train a :class:`~dwtune.study.feed.RequestFeed` until every stream is done, in one
        Tune run: each slot takes the feed's next request as it frees, so a pair whose points
        are in proposes and trains its next point while other pairs are still training."""
        feed.start(lambda r: reusable_record(self.store, r, self._failed_here))
        first = feed.queued[0] if feed.queued else None
        stage = first.stage if first is not None else vocabulary.Stage.REFINE
        if self.progress:
            costs = {r.trial_id: self._cost(r) for r in feed.queued}
            self.progress.begin(stage, list(feed.queued), [], costs)
        feed.on_queue = self._planned
        try:
            while not feed.done:
                if feed.idle:
                    raise RuntimeError("the feed waits for trainings none will give (a bug)")
                self._fit_feed(stage, feed)
                # Tune ended without recording some handed-out request: recorded as failed
                for trial_id, request in list(feed.in_flight.items()):
                    feed.finished(trial_id, self._recorded(request))
        finally:
            feed.on_queue = None
        if self.progress:
            self.progress.end()

    def _planned(self, requests: list[TrialRequest]) -> None:
        if self.progress:
            self.progress.add(requests, {r.trial_id: self._cost(r) for r in requests})

    def _fit_feed(self, stage: str, feed: RequestFeed) -> None:
        self._prepare_corpus()
        by_id: dict[str, TrialRequest] = {}  # filled as the searcher hands requests out
        fused: dict[str, list[TrialRequest]] = {}  # and the fused trials, as it forms them

        def hand_out(group: list[TrialRequest]) -> None:
            for request in group:
                by_id[request.trial_id] = request
            if len(group) > 1:
                fused[group[0].trial_id] = group
                callback.add_fused(group)

        def recorded(request: TrialRequest, record: TrialRecord) -> None:
            if record.status == vocabulary.STATUS_FAILED:
                self._failed_here.add(request.trial_id)
            feed.finished(request.trial_id, record)

        # refine.early_stop: a point's trainings stop once their sign is settled
        stopper = PairPointStopper(self.spec, feed) if feed.early_context is not None else None
        callback = RecordingCallback(
            self.spec,
            self.store,
            by_id,
            self.progress,
            self.tensorboard,
            stopped_early=stopper is not None,
            on_record=recorded,
        )
        # Tune keeps one pending trial for a custom searcher unless told: enough to fill
        # every slot at once as a round of requests comes in.
        pending = {"TUNE_MAX_PENDING_TRIALS_PG": str(FEED_PENDING_TRIALS)}
        saved = {key: os.environ.get(key) for key in pending}
        embedded_ray.set_env(pending)
        try:
            # a plain closure: Tune pickles the searcher, and the runner holds locks
            spec, gpu_bytes = self.spec, gpu_memory_bytes(self.spec, None)

            def workers_of(request: TrialRequest) -> int:
                return trial_workers(spec, request.shape, gpu_bytes)

            placeable = self._placeable()

            def seeds_of(request: TrialRequest, seeds: int) -> int:
                k = fused_seeds(spec, request.shape, gpu_bytes, seeds)
                while k > 1 and not placeable(k):
                    k -= 1
                return k

            # the feed's sharded trials are capped here, its one-process ones are not
            limit = self._sharded_limit(self.spec.resources.workers_per_trial)
            searcher = FeedSearcher(feed, hand_out, workers_of, limit, seeds_of)
            self._tune(stage, callback, by_id, None, scheduler=stopper, search_alg=searcher)
        finally:
            embedded_ray.set_env(saved)
        if stopper is not None and self.progress:
            self.progress.note(early_stop_summary(self.spec, self.store, stopper.stopped))

    def _tune(
        self,
        stage: str,
        callback: RecordingCallback,
        by_id: dict[str, TrialRequest],
        workers: dict[str, int] | None,
        param_space: dict | None = None,
        scheduler: object = None,
        search_alg: object = None,
        fused: dict[str, list[TrialRequest]] | None = None,
    ) -> None:
        """One Tune run of the requests ``param_space`` or ``search_alg`` give: ``by_id`` holds
        them (the searcher's as it hands them out, each also in its trial's config).
        ``workers``: each batch request's workers, computed once for the run (``None`` for a
        feed, whose trials carry theirs in their configs)."""

        def request_of(trial) -> TrialRequest:
            return trial.config.get(REQUEST_KEY) or by_id[trial.config["trial_id"]]

        name = self._experiment_name(stage)
        reuse = self.spec.resources.gpu == 0 and not self._may_shard(workers)
        if reuse:
            # a staged trial keeps the actor Tune started for it (actor_reuse's docstring)
            actor_reuse.install()
        tuner = tune.Tuner(
            self._trainable(None if search_alg is not None else by_id, workers or {}, fused),
            param_space=param_space,
            tune_config=tune.TuneConfig(
                max_concurrent_trials=self._max_concurrent(workers),
                trial_name_creator=lambda trial: request_of(trial).name,
                trial_dirname_creator=lambda trial: request_of(trial).name,
                # Reusing a CPU trial's worker saves its start-up (~1 s); GPU trials get a
                # fresh process so CUDA memory is returned between trials.
                reuse_actors=reuse,
                scheduler=scheduler,
                search_alg=search_alg,
                num_samples=-1 if search_alg is not None else 1,
            ),
            run_config=tune.RunConfig(
                name=name,
                storage_path=str(self.store.root / vocabulary.RAY_DIR),
                verbose=0,
                callbacks=[callback, *tracker_callbacks(self.trackers, request_of)],
                failure_config=tune.FailureConfig(max_failures=self.spec.resources.retries),
                # every checkpoint kept by Tune: num_to_keep=N makes Tune save the whole
                # experiment state after every N checkpoints of a trial (what grows with the
                # trials of a run); RecordingCallback.on_checkpoint drops all but the latest
                checkpoint_config=tune.CheckpointConfig(num_to_keep=None),
            ),
        )
        try:
            tuner.fit()
            callback.finish_writes()  # a board write that failed stops the study here
        except Exception as exc:
            failure = user_write_error(exc, self.store.root / vocabulary.RAY_DIR)
            if failure is None:
                raise
            raise failure from None  # a full disk: one line, not Tune's traceback of it
        finally:
            callback.discard_boards()
        _remove_run(self.store.root / vocabulary.RAY_DIR / name)
        self._remove_recorded_checkpoints(by_id)

    def _remove_recorded_checkpoints(self, by_id: dict) -> None:
        """Every trial of the run recorded with a final status loses its checkpoints (the
        recorder removes them as each is recorded; a trial stopped mid-write may have left
        files after that); a failed one keeps them for the next driver's retry."""
        for trial_id in by_id:
            record = self.store.read_record(trial_id)
            if record is not None and record.status != vocabulary.STATUS_FAILED:
                remove_train_dir(self.experiment_root, trial_id)

    def _workers(self, requests: list[TrialRequest]) -> dict[str, int]:
        """Workers of each request's trial (1: one process), the planner's choice per cell."""
        gpu_bytes = gpu_memory_bytes(self.spec, None)
        return {r.trial_id: trial_workers(self.spec, r.shape, gpu_bytes) for r in requests}

    def _sharded_limit(self, widest: int) -> int | None:
        """Jobs of ``widest`` workers to run at once: the spec's limit, else as many as the
        cluster holds now or could hold once the autoscaler has added its nodes (never frozen
        at what the nodes up now offer), at least 1."""
        resources = self.spec.resources
        if resources.max_concurrent is not None or widest <= 1:
            return resources.max_concurrent
        return max(
            sharded_concurrency(capacity, resources.cpu, resources.gpu, widest)
            for capacity in cluster_capacities()
        )

    def _may_shard(self, workers: dict[str, int] | None) -> bool:
        """Whether some trial of this run may span workers (``None``: a feed's, not known
        yet, so whenever the spec allows it)."""
        if workers is None:
            return self.spec.resources.workers_per_trial > 1
        return any(n > 1 for n in workers.values())

    def _max_concurrent(self, workers: dict[str, int] | None) -> int | None:
        """The spec's limit; for a run of sharded trials (a batch's: they run in Tune runs of
        their own, :meth:`_fit`), as many jobs of the largest as the cluster holds at once
        (:meth:`_sharded_limit`). Tune sees only a sharded trial's 0.01-CPU driver, and would
        otherwise start every trial, each then waiting on resources with its processes up.
        A feed's run (``workers`` None) is not capped: its searcher caps its sharded trials
        alone (:class:`~.feed_searcher.FeedSearcher`)."""
        if workers is None:
            return self.spec.resources.max_concurrent
        return self._sharded_limit(max(workers.values(), default=1))

    def _trainable(
        self,
        by_id: dict[str, TrialRequest] | None,
        workers: dict[str, int],
        fused: dict[str, list[TrialRequest]] | None = None,
    ):
        """The trial function; a batch's requests, ``workers`` and ``fused`` trials travel
        with it, a feed's in each config (with the workers each spans). A fused trial of k
        seeds holds k seeds' CPUs and GPUs (at most one GPU: its model is on one device)."""
        fused = fused or {}
        trainable = tune.with_parameters(
            trial_main,
            spec=self.trial_spec,
            experiment_root=self.experiment_root,
            requests=by_id,
            workers=workers,
            offers=node_offers() if self._may_shard(workers or None) else [],
            fused=fused,
        )
        cpu, gpu = self.spec.resources.cpu, self.spec.resources.gpu

        def held(k: int) -> dict[str, float]:
            amounts = {"CPU": k * cpu, "GPU": min(k * gpu, 1.0) if k > 1 else gpu}
            return {key: amount for key, amount in amounts.items() if amount > 0}

        # A sharded trial's Tune function only waits on its Ray Train job, whose workers
        # hold the CPUs and GPUs (sharded_trial); the plain ones hold them themselves.
        driver = {"CPU": DRIVER_CPU}

        def resources(config: dict) -> tune.PlacementGroupFactory:
            count = config.get(WORKERS_KEY) or workers.get(config["trial_id"], 1)
            carried = config.get(FUSED_KEY) or fused.get(config.get("trial_id", ""), ())
            seeds = len(carried) or 1
            return tune.PlacementGroupFactory([held(seeds) if count == 1 else driver])

        return tune.with_resources(trainable, resources)


def _remove_run(run_dir: Path) -> None:
    """Remove a recorded batch's Tune run folder. dwtune resumes from its own records, never
    through ``Tuner.restore`` (module doc), so the folder is state no tool can use: its
    experiment state runs to about 35 kB a trial. Trials keep their checkpoints elsewhere,
    under ``<experiment>/train`` (:mod:`.checkpoints`), where a later driver finds them."""
    shutil.rmtree(run_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        run_dir.parent.rmdir()  # ray/ itself, once no run of a live or killed driver is left
