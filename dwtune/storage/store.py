"""The experiment directory: dwtune's own durable state (pure: stdlib + yaml).

Ray Tune's restore cannot add trials, so dwtune keeps its own record of finished trials, one
JSON file per trial identity, written atomically. Everything else (Parquet, report, Optuna
studies) is derived from or stored beside these records::

    <storage>/<spec name>/
        spec.yaml            resolved spec the directory was created with
        .driver.lock         held by the one driver working on this directory
        trials/<id>.json     one finished or failed trial each
        tb/                  TensorBoard event files
        refine/optuna.journal  Optuna studies of the refine stage, one per pair
        trials.parquet, curves.parquet, transitions.parquet, fit.json, report.md, figures/
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import yaml

from dwtune import __version__
from dwtune.core.errors import InputError
from dwtune.core.records import RECORD_SCHEMA_VERSION, TrialRecord
from dwtune.core.spec import SPLIT_FIELDS, ExperimentSpec, spec_from_dict
from dwtune.core.vocabulary import (
    CURVES_FILE,
    FIGURES_DIR,
    FIT_FILE,
    LENGTH_CHECK_FILE,
    LR_SEARCH_DIR,
    PAIR_DELTAS_FILE,
    PROJECTIONS_FILE,
    RAY_DIR,
    REFINE_DIR,
    REPORT_FILE,
    SPEC_FILE,
    TB_DIR,
    TRAIN_DIR,
    TRANSITIONS_FILE,
    TRIAL_RECORDS_DIR,
    TRIALS_FILE,
)
from dwtune.storage import loaders
from dwtune.storage.loaders import SCHEMA_KEY, WRITER_KEY

# Sections whose change would change what a trial computes: a directory refuses such a spec.
# space, refine, fit and resources may change (that is how a study grows).
IDENTITY_SECTIONS = ("data", "model", "train", "trainer", "simulated")
# Write failures a user fixes, and how.
WRITE_ERRNOS = {
    errno.ENOSPC: "free disk space or pass another --storage",
    errno.EDQUOT: "free space within your quota or pass another --storage",
    errno.EACCES: "make the folder writable or pass another --storage",
    errno.EPERM: "make the folder writable or pass another --storage",
    errno.EROFS: "the filesystem is read-only: pass another --storage",
}


# Subfolders a study writes in, checked before it starts (a read-only one would otherwise fail
# after training, as the first result is written there).
WRITTEN_FOLDERS = (TRIAL_RECORDS_DIR, TB_DIR, REFINE_DIR, FIGURES_DIR, RAY_DIR)
LOCK_FILE = ".driver.lock"
# Everything dwtune reads or writes directly in an experiment folder. A symlink among them that
# leaves the folder would make a run write its results elsewhere, or an export replace the
# tables with another folder's records: such a layout is refused (ExperimentStore.check_layout).
LAYOUT = (
    *WRITTEN_FOLDERS,
    TRAIN_DIR,
    LR_SEARCH_DIR,
    SPEC_FILE,
    LOCK_FILE,
    TRIALS_FILE,
    CURVES_FILE,
    TRANSITIONS_FILE,
    PAIR_DELTAS_FILE,
    LENGTH_CHECK_FILE,
    FIT_FILE,
    PROJECTIONS_FILE,
    REPORT_FILE,
)


def _check_writable(folder: Path) -> None:
    """Create and remove a file in ``folder`` (if it exists): only a write tells for sure
    (os.access trusts permission bits, which root passes, and NFS may refuse root anyway)."""
    if not folder.is_dir():
        return
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".dwtune-write-check-"):
            pass
    except OSError as exc:
        raise InputError(
            f"storage {folder}: not writable ({os.strerror(exc.errno or 0)}); "
            f"{_write_fix(folder)} or pass a writable --storage, then rerun"
        ) from None


FS_IOC_GETFLAGS = 0x80086601  # Linux ioctl that reads a file's attributes (what lsattr shows)
LOCKED_ATTRIBUTES = {0x10: ("immutable", "i"), 0x20: ("append-only", "a")}


def _attribute_flags(folder: Path) -> int:
    """The folder's attribute flags; 0 where they cannot be read (not Linux, or a filesystem
    without them)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return 0
    try:
        return struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(8))[:4])[0]
    except OSError:
        return 0
    finally:
        os.close(fd)


def _write_fix(folder: Path) -> str:
    """How to make ``folder`` writable: clear an immutable or append-only attribute (which no
    permission bit overrides, for root neither), else the permission bits."""
    flags = _attribute_flags(folder)
    for bit, (name, letter) in LOCKED_ATTRIBUTES.items():
        if flags & bit:
            return f"it has the {name} attribute: clear it (chattr -{letter} {folder})"
    return f"make it writable (chmod -R u+w {folder})"


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary handle on a temporary file beside ``path``; fsynced and renamed over ``path``
    when the block ends, removed if it raises. Readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())  # mkstemp makes 0600; results follow the umask like others
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def file_mode() -> int:
    """0666 less the process's umask: the mode open() gives a new file."""
    return 0o666 & ~_umask()


def _umask() -> int:
    """The umask, read without changing it (os.umask would race with other threads)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # no /proc (macOS): set and restore
    os.umask(mask)
    return mask


def write_failure(path: Path | str, error_number: int | None) -> InputError | None:
    """The one line for a write of ``path`` that failed with ``error_number``, if a user
    fixes that kind of failure (a full disk, an unwritable folder); else None."""
    if error_number not in WRITE_ERRNOS:
        return None
    return InputError(
        f"{path}: cannot write it ({os.strerror(error_number)}); {WRITE_ERRNOS[error_number]}, "
        f"then rerun the same command: finished results are kept and not recomputed"
    )


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """A full disk or an unwritable folder while writing ``path`` is one InputError line."""
    try:
        yield
    except OSError as exc:
        failure = write_failure(path, exc.errno)
        if failure is None:
            raise
        raise failure from None


def user_write_error(exc: BaseException, where: Path | str) -> InputError | None:
    """An InputError or a fixable write failure anywhere in ``exc``'s chain, else None.

    Ray Tune wraps an exception raised in a driver callback in a TuneError whose context is
    the original, and its own writes (experiment state, checkpoints) fail with a bare OSError;
    ``where`` names the folder when the OSError names no file."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, InputError):
            return exc
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
            return write_failure(exc.filename or where, exc.errno)
        exc = exc.__cause__ or exc.__context__
    return None


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    with atomic_file(path) as handle:
        handle.write(payload)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def spec_differences(old: dict, new: dict) -> list[str]:
    """Dotted keys of identity-relevant settings that differ between two resolved specs (how a
    batch is split, train.micro_batch_size and train.activation_checkpointing, is not one)."""
    diffs = []
    for section in IDENTITY_SECTIONS:
        a, b = old.get(section), new.get(section)
        if isinstance(a, dict) and isinstance(b, dict):
            keys = sorted(set(a) | set(b))
            if section == "train":
                keys = [k for k in keys if k not in SPLIT_FIELDS]
            diffs += [f"{section}.{k}" for k in keys if a.get(k) != b.get(k)]
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
        self.check_layout()
        self._make_dirs()
        for folder in (self.root, *(self.root / name for name in WRITTEN_FOLDERS)):
            _check_writable(folder)
        new = spec.to_dict()
        if self.spec_path.exists():
            diffs = spec_differences(self.load_spec_dict(), new)
            if diffs:
                raise InputError(
                    f"{self.root} holds a different spec (changed: {', '.join(diffs)}); "
                    f"give the spec a new name, or use another --storage"
                )
        with writing(self.spec_path):
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
        return loaders.load_spec_mapping(self.inside(self.spec_path))

    # ------------------------------------------------------------------ layout

    def inside(self, path: Path) -> Path:
        """``path`` if, symlinks followed, it stays inside the experiment; else one line."""
        try:
            target = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop
            target = None
        if target is not None and target.is_relative_to(self.root):
            return path
        where = f"a symlink to {target}" if target is not None else "a symlink loop"
        raise InputError(
            f"{path}: {where}, outside the experiment; dwtune reads and writes only inside "
            f"it: put the real file or folder there in place of the link, then rerun"
        )

    def check_layout(self) -> None:
        """Every entry dwtune uses stays inside the experiment, and trials/ is a folder: a
        trials/ that is a file or leads elsewhere holds none of this experiment's records."""
        for name in LAYOUT:
            self.inside(self.root / name)
        trials = self.trials_dir
        if (trials.exists() or trials.is_symlink()) and not trials.is_dir():
            raise InputError(
                f"{trials}: not a folder; it must be the folder of this experiment's trial "
                f"records: restore it from a backup (trials.parquet is left as it is)"
            )

    def load_spec(self) -> ExperimentSpec:
        return spec_from_dict(self.load_spec_dict(), source=str(self.spec_path))

    # ------------------------------------------------------------------ lock

    @contextlib.contextmanager
    def driver_lock(self) -> Iterator[None]:
        """Exclusive per-directory lock; a second driver refuses at once.

        flock is released by the kernel when the process dies, so a SIGKILLed driver never
        leaves a stale lock behind.
        """
        self.check_layout()
        self._make_dirs()
        handle = os.fdopen(self._open_lock(), "r+")  # held for the block
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

    def _open_lock(self) -> int:
        """The lock file, opened without following a link: the lock is written (the owner's
        pid), so a link planted there would have dwtune write a file outside the folder."""
        path = self.root / LOCK_FILE
        try:  # O_NOFOLLOW: a symlink fails with ELOOP; the link count is read on what opened
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, file_mode())
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EISDIR):
                raise
            fd = None
        if fd is not None:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                return fd
            os.close(fd)
        what = loaders.link_problem(path) or "not a regular file"
        raise InputError(
            f"{path}: {what}; the driver lock must be a file of its own: remove it (it holds "
            f"only the last driver's pid) and rerun"
        )

    # ------------------------------------------------------------------ records

    def record_path(self, trial_id: str) -> Path:
        return self.trials_dir / f"{trial_id}.json"

    def write_record(self, record: TrialRecord) -> None:
        raw = {SCHEMA_KEY: RECORD_SCHEMA_VERSION, WRITER_KEY: __version__, **record.to_json()}
        path = self.record_path(record.trial_id)
        with writing(path):
            atomic_write_text(path, json.dumps(raw))

    def read_record(self, trial_id: str) -> TrialRecord | None:
        path = self.record_path(trial_id)
        return self._load(path) if path.exists() or path.is_symlink() else None

    def records(self) -> list[TrialRecord]:
        """Every recorded trial, sorted for stable exports."""
        self.check_layout()
        if not self.trials_dir.exists():
            return []
        loaded = [self._load(p) for p in sorted(self.trials_dir.glob("*.json"))]
        return sorted(loaded, key=lambda r: (r.depth, r.width, r.seed, r.trial_id))

    def _load(self, path: Path) -> TrialRecord:
        return loaders.load_trial_record(self.inside(path))
