"""One loader per file kind of an experiment directory, each validating shape and types.

A damaged file is one :class:`InputError` line: the file, what is wrong with it, and what to do
(re-run the command that writes it, restore it, or remove that one file; "remove" is said only
where removing loses nothing that a rerun does not recompute). Nothing else is touched.

Kinds: the experiment's ``spec.yaml`` (:func:`load_spec_mapping`), a trial record
(:func:`load_trial_record`, its curve checked by :func:`check_curve`), a refine journal
(:func:`check_journal`), and any dwtune JSON file (:func:`read_json`, used for ``fit.json``).
Parquet tables are read by ``provenance.read_parquet_checked``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
from pathlib import Path

import yaml

from dwtune import __version__
from dwtune.core import vocabulary
from dwtune.core.errors import InputError, shown
from dwtune.core.records import RECORD_SCHEMA_VERSION, TrialRecord
from dwtune.core.spec import limits
from dwtune.core.spec.checks import nesting_depth, shape_problem

# What to do about a damaged trial record: the stage that needs it trains it again (the refine
# stage retrains a journal point's missing trainings), so removing it loses nothing.
RECORD_ADVICE = (
    "remove that one file and rerun: that trial is trained again (other results are intact)"
)
SPEC_ADVICE = "restore it, or rerun `dwtune run SPEC` with the spec it was created from"
MAX_INT = 2**62  # counts in a record (parameters, tokens, steps) stay far below int64
STAGES = tuple(vocabulary.Stage)
STATUSES = tuple(vocabulary.TrialStatus)
SCHEMA_KEY = "schema_version"  # of the trial-record JSON; absent before it existed: 1
WRITER_KEY = "dwtune_version"  # the dwtune that wrote the record


def damaged(path: Path, problem: str, advice: str) -> InputError:
    return InputError(f"{path}: {problem}; {advice}")


def read_bytes(path: Path, max_bytes: int, advice: str) -> bytes:
    """A regular file's bytes, at most ``max_bytes``; anything else is one line."""
    try:
        if not path.is_file():
            raise damaged(path, "not a regular file", advice)
        size = path.stat().st_size
        if size > max_bytes:
            raise damaged(path, f"{size} bytes, more than the {max_bytes} allowed", advice)
        return path.read_bytes()
    except PermissionError:
        raise InputError(f"{path}: not readable (permission denied); fix its permissions") from None
    except OSError as exc:
        raise damaged(path, f"cannot be read ({exc.strerror})", advice) from None


def _parse_bounded(path: Path, text: str, advice: str, parse) -> object:
    try:
        value = parse(text)
    except RecursionError:
        value = None
        deep = True
    else:
        deep = nesting_depth(value, limits.MAX_NESTING) > limits.MAX_NESTING
    if deep:
        raise damaged(path, f"nested deeper than {limits.MAX_NESTING} levels", advice)
    return value


def read_json(
    path: Path, advice: str, what: str = "corrupt", max_bytes: int = limits.MAX_JSON_BYTES
) -> object:
    """A JSON file's value (bounded in size and nesting); damage is one line naming it."""
    data = read_bytes(path, max_bytes, advice)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise damaged(path, f"{what} (not UTF-8 text)", advice) from None
    try:
        return _parse_bounded(path, text, f"{what}; {advice}", json.loads)
    except json.JSONDecodeError as exc:
        problem = f"{what} (not valid JSON: {exc.msg} at line {exc.lineno})"
        raise damaged(path, problem, advice) from None


def load_spec_mapping(path: Path) -> dict:
    """The resolved spec an experiment directory was created with, as a mapping."""
    if not path.exists():
        raise InputError(f"{path.parent}: no spec.yaml; is this an experiment directory?")
    data = read_bytes(path, limits.MAX_SPEC_BYTES, SPEC_ADVICE)
    try:
        raw = _parse_bounded(path, data.decode(), SPEC_ADVICE, yaml.safe_load)
    except UnicodeDecodeError:
        raise damaged(path, "corrupt: not UTF-8 text", SPEC_ADVICE) from None
    except yaml.YAMLError:
        raise damaged(path, "corrupt: not valid YAML", SPEC_ADVICE) from None
    problem = shape_problem(raw)  # an alias bomb would hang whatever walks it next
    if problem:
        raise damaged(path, f"corrupt: {problem}", SPEC_ADVICE)
    if not isinstance(raw, dict):
        raise damaged(path, f"corrupt: holds a {type(raw).__name__}, not a mapping", SPEC_ADVICE)
    return raw


# --------------------------------------------------------------------------- trial records


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_INT


def _is_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not isinstance(value, int) or abs(value) <= MAX_INT


def _field_problem(name: str, kind: type, value: object) -> str | None:
    """What is wrong with one record field's value, or None."""
    if kind is str and not isinstance(value, str):
        return f"{name} is {type(value).__name__}, expected a string"
    if kind is bool and not isinstance(value, bool):
        return f"{name} is {shown(value)}, expected true or false"
    if kind is int and not (_is_int(value) and value >= 0):
        return f"{name} is {shown(value)}, expected a whole number 0..{MAX_INT}"
    if kind is float and not _is_number(value):
        return f"{name} is {shown(value)}, expected a number"
    return None


def check_curve(curve: object) -> str | None:
    """What is wrong with a record's curve (a list of reports), or None."""
    if not isinstance(curve, list):
        return f"curve is {type(curve).__name__}, expected a list of reports"
    for index, point in enumerate(curve):
        if not isinstance(point, dict):
            return f"curve[{index}] is {type(point).__name__}, expected a mapping"
        for key, value in point.items():
            if key == vocabulary.STATUS:
                ok = isinstance(value, str)
            elif key in (vocabulary.STEP, vocabulary.TOKENS):
                ok = _is_int(value) and value >= 0
            else:
                ok = _is_number(value)
            if not ok:
                return f"curve[{index}][{shown(key)}] is {shown(value)}, expected a number"
    return None


def _type_problem(raw: dict) -> str | None:
    """What is wrong with a present field's type, or None (unknown keys are allowed)."""
    kinds = {"str": str, "int": int, "float": float, "bool": bool}
    for spec in dataclasses.fields(TrialRecord):
        if spec.name in ("curve", "val_windows") or spec.name not in raw:
            continue
        problem = _field_problem(spec.name, kinds[str(spec.type)], raw[spec.name])
        if problem:
            return problem
    return check_windows(raw.get("val_windows", []))


def check_windows(windows: object) -> str | None:
    """What is wrong with a record's window losses (a list of numbers), or None."""
    if not isinstance(windows, list) or not all(_is_number(v) for v in windows):
        return "val_windows is not a list of numbers"
    return None


def _value_problem(raw: dict, path: Path) -> str | None:
    """What is wrong with a complete, well-typed record's values, or None."""
    if raw["trial_id"] != path.stem:
        return f"trial_id {shown(raw['trial_id'])} does not match the file name"
    if raw["stage"] not in STAGES or raw["status"] not in STATUSES:
        return f"stage {shown(raw['stage'])} / status {shown(raw['status'])} unknown"
    if not (math.isfinite(raw["budget"]) and raw["budget"] > 0):
        return f"budget is {shown(raw['budget'])}, expected a positive number"
    return check_curve(raw.get("curve", []))


def migrate_record(path: Path, raw: dict) -> dict:
    """The record's fields at this schema version; InputError (file untouched) if it cannot be.

    A record without ``schema_version`` was written before the field existed: version 1.
    """
    version = raw.get(SCHEMA_KEY, 1)
    if not isinstance(version, int) or version > RECORD_SCHEMA_VERSION:
        writer = raw.get(WRITER_KEY, "a newer dwtune")
        raise InputError(
            f"{path}: trial record schema version {shown(version)}, written by dwtune {writer}; "
            f"this dwtune {__version__} reads versions up to {RECORD_SCHEMA_VERSION}: "
            f"install dwtune {writer} or newer to read this experiment (file left untouched)"
        )
    problem = _type_problem(raw)
    if problem:
        raise damaged(path, f"corrupt trial record ({problem})", RECORD_ADVICE)
    missing = sorted(TrialRecord.required_fields() - raw.keys())
    if missing:  # an older or newer layout, not a torn file: keep it
        raise InputError(
            f"{path}: trial record (schema version {version}) lacks {', '.join(missing)}; "
            f"restore it from a backup or move it aside to train that trial again"
        )
    return raw


def load_trial_record(path: Path) -> TrialRecord:
    """One trial record, validated; damage is one line naming the file and the fix."""
    raw = read_json(path, RECORD_ADVICE, "corrupt trial record")
    if not isinstance(raw, dict):
        problem = f"holds {type(raw).__name__}, expected a JSON object"
        raise damaged(path, f"corrupt trial record ({problem})", RECORD_ADVICE)
    raw = migrate_record(path, raw)
    problem = _value_problem(raw, path)
    if problem:
        raise damaged(path, f"corrupt trial record ({problem})", RECORD_ADVICE)
    return TrialRecord.from_json(raw)


# --------------------------------------------------------------------------- refine journals

JOURNAL_OP_KEY = "op_code"  # every line Optuna's JournalStorage appends carries one


def journal_advice(path: Path) -> str:
    # the experiment's one journal holds every pair's study; a per-pair one (an experiment
    # written before) holds one pair's
    shared = path.name == vocabulary.REFINE_JOURNAL
    restarted = "every pair's refinement" if shared else "this pair's refinement"
    return (
        f"remove {path.name} to restart {restarted}: it proposes the same points "
        f"again and reuses every training recorded in trials/ (nothing is lost)"
    )


def _journal_line_ok(line: bytes) -> bool:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and _is_int(value.get(JOURNAL_OP_KEY))


def link_problem(path: Path) -> str | None:
    """Why writing ``path`` in place would write through a link, or None (missing, or a file
    of its own). A symlink leads to another file; a hard link is another name of a file that
    may lie outside the experiment (its other name cannot be found, only counted)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "a symlink"
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        return f"a hard link (one file with {info.st_nlink} names, maybe outside the experiment)"
    return None


def refuse_link(path: Path, advice: str) -> None:
    """One line when ``path``, a file appended to in place, is a symlink or a hard link."""
    problem = link_problem(path)
    if problem:
        raise damaged(path, f"{problem}; dwtune appends to it only as a file of its own", advice)


def check_journal(path: Path, say) -> None:
    """A refine journal Optuna can replay: a torn last line (a kill or a full disk during an
    append) is cut off with a message; any other damage is one line saying what to do."""
    if not path.exists() and not path.is_symlink():
        return
    advice = journal_advice(path)
    refuse_link(path, advice)  # Optuna appends to it: a link would write another file
    data = read_bytes(path, limits.MAX_JSON_BYTES, advice)
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: b"" when the last append completed
    for number, line in enumerate(lines, start=1):
        if not _journal_line_ok(line):
            problem = f"corrupt Optuna journal (line {number} is not an operation)"
            raise damaged(path, problem, advice)
    if torn:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)  # refuse_link checked
        try:
            os.ftruncate(fd, len(data) - len(torn))
            os.fsync(fd)
        finally:
            os.close(fd)
        say(f"{path}: cut off a partial last line ({len(torn)} bytes, an interrupted append)")


def clear_stale_journal_lock(path: Path, say) -> None:
    """Remove the journal's lock file a killed driver left. Only the driver holding the
    experiment's driver lock opens journals, so any lock file found then is stale."""
    lock = Path(f"{path}.lock")
    if lock.is_symlink() or lock.exists():
        lock.unlink()
        say(f"{lock}: removed a lock left by an interrupted driver")


# --------------------------------------------------------------------------- Parquet exports


def parquet_problem(path: Path) -> str | None:
    """Why an existing Parquet export cannot be read, or None (also None when absent)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.exists() and not path.is_symlink():
        return None
    if not path.is_file():
        return "not a regular file"
    try:
        pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        return (str(exc).splitlines() or ["unreadable"])[0][:200]
    return None
