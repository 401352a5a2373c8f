"""The experiment directory: dwtune's own durable state (pure: stdlib + yaml).

Ray Tune's restore cannot add trials, so dwtune keeps its own record of finished trials, one
JSON file per trial identity, written atomically. Everything else (Parquet, report, Optuna
studies) is derived from or stored beside these records::

    <storage>/<spec name>/
        spec.yaml            resolved spec the directory was created with
        .driver.lock         held by the one driver working on this directory
        trials/<id>.json     one finished or failed trial each
        tb/                  TensorBoard event files
        refine/              Optuna studies of the refine stage
        trials.parquet, curves.parquet, transitions.parquet, fit.json, report.md, figures/
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import yaml

from dwtune import __version__
from dwtune.core.errors import InputError
from dwtune.core.records import RECORD_SCHEMA_VERSION, TrialRecord
from dwtune.core.spec import ExperimentSpec, spec_from_dict
from dwtune.core.vocabulary import SPEC_FILE, TRIAL_RECORDS_DIR

SCHEMA_KEY = "schema_version"  # of the trial-record JSON; absent before it existed: 1
WRITER_KEY = "dwtune_version"  # the dwtune that wrote the record

# Sections whose change would change what a trial computes: a directory refuses such a spec.
# space, refine, fit and resources may change (that is how a study grows).
IDENTITY_SECTIONS = ("data", "model", "train", "trainer", "simulated")


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary handle on a temporary file beside ``path``; fsynced and renamed over ``path``
    when the block ends, removed if it raises. Readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    with atomic_file(path) as handle:
        handle.write(payload)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def spec_differences(old: dict, new: dict) -> list[str]:
    """Dotted keys of identity-relevant settings that differ between two resolved specs."""
    diffs = []
    for section in IDENTITY_SECTIONS:
        a, b = old.get(section), new.get(section)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += [f"{section}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            diffs.append(section)
    return diffs


class ExperimentStore:
    """Finished-trial records and the driver lock of one experiment directory."""

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().resolve()
        self.trials_dir = self.root / TRIAL_RECORDS_DIR
        self._lock_handle = None

    @classmethod
    def for_spec(cls, storage: str | Path, spec: ExperimentSpec) -> ExperimentStore:
        return cls(Path(storage).expanduser().resolve() / spec.name)

    # ------------------------------------------------------------------ spec

    @property
    def spec_path(self) -> Path:
        return self.root / SPEC_FILE

    def initialise(self, spec: ExperimentSpec) -> None:
        """Create the directory for ``spec``, or check that it holds a compatible spec."""
        self._make_dirs()
        if not os.access(self.root, os.W_OK):
            raise InputError(f"storage {self.root}: not writable; pass a writable --storage")
        new = spec.to_dict()
        if self.spec_path.exists():
            diffs = spec_differences(self.load_spec_dict(), new)
            if diffs:
                raise InputError(
                    f"{self.root} holds a different spec (changed: {', '.join(diffs)}); "
                    f"give the spec a new name, or use another --storage"
                )
        atomic_write_text(self.spec_path, yaml.safe_dump(new, sort_keys=False))

    def _make_dirs(self) -> None:
        try:
            self.trials_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(
                f"storage {self.root.parent}: cannot create the experiment directory "
                f"({exc.strerror}); pass a writable --storage"
            ) from None

    def load_spec_dict(self) -> dict:
        if not self.spec_path.exists():
            raise InputError(f"{self.root}: no spec.yaml; is this an experiment directory?")
        try:
            raw = yaml.safe_load(self.spec_path.read_text())
        except yaml.YAMLError:
            raw = None
        if not isinstance(raw, dict):
            raise InputError(f"{self.spec_path}: corrupt; restore it or rerun `dwtune run SPEC`")
        return raw

    def load_spec(self) -> ExperimentSpec:
        return spec_from_dict(self.load_spec_dict(), source=str(self.spec_path))

    # ------------------------------------------------------------------ lock

    @contextlib.contextmanager
    def driver_lock(self) -> Iterator[None]:
        """Exclusive per-directory lock; a second driver refuses at once.

        flock is released by the kernel when the process dies, so a SIGKILLed driver never
        leaves a stale lock behind.
        """
        self._make_dirs()
        handle = open(self.root / ".driver.lock", "a+")  # noqa: SIM115 - held for the block
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            handle.close()
            raise InputError(
                f"{self.root} is in use by another dwtune driver ({owner}); wait for it to "
                f"finish, or stop it"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {os.uname().nodename}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()

    # ------------------------------------------------------------------ records

    def record_path(self, trial_id: str) -> Path:
        return self.trials_dir / f"{trial_id}.json"

    def write_record(self, record: TrialRecord) -> None:
        raw = {SCHEMA_KEY: RECORD_SCHEMA_VERSION, WRITER_KEY: __version__, **record.to_json()}
        atomic_write_text(self.record_path(record.trial_id), json.dumps(raw))

    def read_record(self, trial_id: str) -> TrialRecord | None:
        path = self.record_path(trial_id)
        return self._load(path) if path.exists() else None

    def records(self) -> list[TrialRecord]:
        """Every recorded trial, sorted for stable exports."""
        if not self.trials_dir.exists():
            return []
        loaded = [self._load(p) for p in sorted(self.trials_dir.glob("*.json"))]
        return sorted(loaded, key=lambda r: (r.depth, r.width, r.seed, r.trial_id))

    def _load(self, path: Path) -> TrialRecord:
        try:
            raw = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):  # a truncated or garbled file
            raise InputError(
                f"{path}: corrupt trial record; delete it and rerun to train that trial again "
                f"(other results are intact)"
            ) from None
        return TrialRecord.from_json(migrate_record(path, raw))


def migrate_record(path: Path, raw: object) -> dict:
    """The record's fields at this schema version; InputError (file untouched) if it cannot be.

    A record without ``schema_version`` was written before the field existed: version 1.
    """
    if not isinstance(raw, dict):
        raise InputError(
            f"{path}: not a trial record (a JSON {type(raw).__name__}, expected an object); "
            f"move it out of {TRIAL_RECORDS_DIR}/ (it was not written by dwtune)"
        )
    version = raw.get(SCHEMA_KEY, 1)
    if not isinstance(version, int) or version > RECORD_SCHEMA_VERSION:
        writer = raw.get(WRITER_KEY, "a newer dwtune")
        raise InputError(
            f"{path}: trial record schema version {version!r}, written by dwtune {writer}; "
            f"this dwtune {__version__} reads versions up to {RECORD_SCHEMA_VERSION}: "
            f"install dwtune {writer} or newer to read this experiment (file left untouched)"
        )
    missing = sorted(TrialRecord.required_fields() - raw.keys())
    if missing:
        raise InputError(
            f"{path}: trial record (schema version {version}) lacks {', '.join(missing)}; "
            f"restore it from a backup or move it aside to train that trial again"
        )
    return raw
