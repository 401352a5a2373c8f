"""Provenance and atomic Parquet writes shared by every exported table.

Every Parquet file dwtune writes carries, as file metadata, the resolved spec, the versions of
the packages that produced it and the git revision of the code, and is written atomically
(temporary file, then rename) so a reader never sees half a file.

The same provenance, with each column's description, is also stored where pandas looks for a
frame's ``attrs`` (the ``PANDAS_ATTRS`` schema metadata), so ``pd.read_parquet(path).attrs``
holds ``spec``, ``versions``, ``git_revision``, ``table`` and ``columns`` (column ->
description).
"""

from __future__ import annotations

import functools
import io
import json
import subprocess
from importlib import metadata
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dwtune.storage.schemas import column_descriptions
from dwtune.storage.store import atomic_write_bytes

PACKAGES = (
    "dwtune",
    "torch",
    "ray",
    "optuna",
    "pandas",
    "scipy",
    "pyarrow",
    "numpy",
    "tensorboard",
    "tensorboardX",
    "matplotlib",
    "tokenizers",
)


@functools.cache  # fixed for the life of the process; asked for by every file written
def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


@functools.cache  # one `git` subprocess per process, not two per exported file
def git_revision() -> str:
    """The code's git revision (with '-dirty' for local changes), or 'unknown'."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("-dirty" if dirty else "")


def provenance(spec_dict: dict | None) -> dict[bytes, bytes]:
    """File metadata: ``dwtune.core.spec``, ``dwtune.versions``, ``dwtune.git_revision``."""
    return {
        SPEC_KEY: json.dumps(spec_dict or {}, sort_keys=True).encode(),
        VERSIONS_KEY: json.dumps(package_versions(), sort_keys=True).encode(),
        GIT_KEY: git_revision().encode(),
    }


# The schema metadata key pandas restores ``DataFrame.attrs`` from (pandas.io.parquet).
PANDAS_ATTRS_KEY = b"PANDAS_ATTRS"
SPEC_KEY, VERSIONS_KEY, GIT_KEY = b"dwtune.core.spec", b"dwtune.versions", b"dwtune.git_revision"


def pandas_attrs(spec_dict: dict | None, name: str, schema: pa.Schema) -> dict:
    """What ``pd.read_parquet(path).attrs`` holds for a table dwtune wrote."""
    return {
        "table": name,
        "spec": spec_dict or {},
        "versions": package_versions(),
        "git_revision": git_revision(),
        "columns": column_descriptions(schema),
    }


def frame_attrs(schema: pa.Schema) -> dict:
    """A file's ``attrs`` as pandas restores them (empty for a file written without them)."""
    raw = (schema.metadata or {}).get(PANDAS_ATTRS_KEY)
    try:
        attrs = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return attrs if isinstance(attrs, dict) else {}


def write_parquet_atomic(table: pa.Table, path: Path, spec_dict: dict | None) -> Path:
    """Write ``table`` with provenance metadata (and pandas ``attrs``) to ``path`` atomically."""
    existing = table.schema.metadata or {}
    attrs = pandas_attrs(spec_dict, Path(path).name, table.schema)
    attrs_json = json.dumps(attrs, default=str).encode()  # columns in the table's order
    metadata = {**existing, **provenance(spec_dict), PANDAS_ATTRS_KEY: attrs_json}
    table = table.replace_schema_metadata(metadata)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    atomic_write_bytes(Path(path), buffer.getvalue())
    return Path(path)


def read_parquet_checked(
    path: Path, required: tuple[str, ...], renamed: dict[str, str] | None = None
) -> pa.Table:
    """Read a dwtune Parquet file; InputError naming the file if corrupt or missing columns.
    ``renamed`` (old name -> new name): a column under its old name counts as the new one."""
    from dwtune.core.errors import InputError

    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file; run `dwtune export` or `dwtune run` first")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(
            f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]}); "
            f"re-export it with `dwtune export`"
        ) from None
    present = {*table.column_names, *((renamed or {}).get(c, c) for c in table.column_names)}
    missing = [c for c in required if c not in present]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)}; "
            f"expected a dwtune export with {', '.join(required)}"
        )
    return table


def table_trial_ids(path: Path) -> list[str] | None:
    """The ``trial_id`` column of an existing, readable table; None when it is absent or
    unreadable (an unreadable export is rebuilt from the records: nothing to keep there)."""
    if not Path(path).is_file():
        return None
    try:
        column = pq.read_table(path, columns=["trial_id"]).column("trial_id")
    except (pa.ArrowException, OSError, ValueError, KeyError):
        return None
    return [str(value) for value in column.to_pylist()]


def refuse_losing_trials(path: Path, trial_ids: set[str]) -> None:
    """Refuse to replace the table at ``path`` with one that lacks any trial it holds: when the
    records are gone (a trials/ folder removed or replaced) it is the last copy of them."""
    from dwtune.core.errors import InputError

    held = table_trial_ids(path)
    if held is None:
        return
    lost = set(held) - trial_ids
    if lost:
        raise InputError(
            f"{path}: holds {len(held)} trials and the records hold {len(trial_ids)}, "
            f"{len(lost)} of its trials missing; not replaced (it may be their last copy): "
            f"restore the missing records in trials/, or move {Path(path).name} aside to "
            f"export only what trials/ holds"
        )
