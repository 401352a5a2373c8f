"""The JSON Schema of a study spec, for editors: ``docs/spec.schema.json`` is its output.

Regenerate it with ``python -m dwtune.outputs.spec_schema > docs/spec.schema.json``; a test keeps
the published file in step. The schema is derived from the spec's own dataclasses
(:mod:`dwtune.core.spec.sections`), so it cannot drift from what the loader accepts: pydantic
turns the fields and defaults into JSON Schema, the comments beside each field become its
description, and the forms the loader coerces (sizes such as ``175B``, ``budgets: {min, max,
num}``, a seed count, ``train.lr: {search: ...}``) are added here. Validation itself stays the
loader's (every error in one pass, with the fix); the schema serves completion and hover in an
editor (``# yaml-language-server: $schema=...`` at the top of a spec).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import sys
from typing import Any

from pydantic import TypeAdapter

from dwtune.core.spec import ExperimentSpec, sections
from dwtune.core.spec.load import SECTIONS, TOP_LEVEL
from dwtune.core.spec.sections import LrSearchConfig

# A size or count written as YAML text: 175B, 1e6 (PyYAML reads 1e6 without a dot as text), 3.5M
SIZE_TEXT = {"type": "string", "pattern": r"^\s*[0-9.]+([eE][+-]?[0-9]+)?\s*[KMBTkmbt]?\s*$"}

# Fields whose values come from a closed list: (section, field) -> the allowed values
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "trainer"): sections.TRAINERS,
    ("data", "tokenizer"): sections.TOKENIZERS,
    ("model", "parametrization"): sections.PARAMETRIZATIONS,
    ("model", "size_convention"): tuple(sections.SIZE_CONVENTIONS),
    ("space", "compare"): sections.COMPARISONS,
    ("train", "schedule"): sections.SCHEDULES,
    ("simulated", "surface"): sections.SIMULATED_SURFACES,
    ("simulated", "curve"): sections.SIMULATED_CURVES,
}
_FIELD_LINE = re.compile(r"^\s+(?P<name>\w+)\s*:[^#]*(#\s*(?P<comment>.*))?$")


def field_comments(cls: type) -> dict[str, str]:
    """Each dataclass field's comment: the comment lines right above it and the one beside it."""
    names = {f.name for f in dataclasses.fields(cls)}
    found: dict[str, str] = {}
    above: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD_LINE.match(line)
        if match and match["name"] in names and match["name"] not in found:
            text = " ".join([*above, match["comment"] or ""]).strip()
            if text:
                found[match["name"]] = text
        above = []
    return found


def spec_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a spec file as the loader accepts it."""
    schema = TypeAdapter(ExperimentSpec).json_schema(mode="validation")
    defs = schema.pop("$defs")
    properties = {k: v for k, v in schema["properties"].items() if k in TOP_LEVEL}
    for section, (cls, _) in SECTIONS.items():
        definition = defs[cls.__name__]
        _describe(section, definition, cls)
        properties[section] = _closed(definition)
    _describe("", {"properties": properties}, ExperimentSpec)
    lr_search = _closed(defs[LrSearchConfig.__name__])
    _describe("train.lr", lr_search, LrSearchConfig)
    _loader_forms(properties, lr_search)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "dwtune study spec",
        "description": "A study spec of dwtune (search_spaces/*.yaml); unknown keys are errors.",
        "type": "object",
        "required": schema.get("required", []),
        "additionalProperties": False,
        "properties": properties,
    }


def _closed(definition: dict[str, Any]) -> dict[str, Any]:
    """A section as its own object: unknown keys refused (as the loader does), no title."""
    properties = {k: _untitled(v) for k, v in definition["properties"].items()}
    closed: dict[str, Any] = {"type": "object", "additionalProperties": False}
    if "description" in definition:
        closed["description"] = " ".join(definition["description"].split())
    closed["properties"] = properties
    return closed


def _untitled(prop: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in prop.items() if k != "title"}


def _describe(section: str, definition: dict[str, Any], cls: type) -> None:
    for name, text in field_comments(cls).items():
        if name in definition["properties"]:
            definition["properties"][name]["description"] = text
    for (where, name), values in CHOICES.items():
        if where == section.split(".")[0] and name in definition["properties"]:
            definition["properties"][name]["enum"] = [str(v) for v in values]


def _loader_forms(properties: dict[str, Any], lr_search: dict[str, Any]) -> None:
    """What the loader coerces beyond the dataclass types (core/spec/load.py's converters)."""
    for section in [properties[name] for name in SECTIONS] + [lr_search]:
        for prop in section["properties"].values():
            _accept_size_text(prop)
    space = properties["space"]["properties"]
    sizes = {"type": "array", "items": {"anyOf": [{"type": "number"}, SIZE_TEXT]}}
    space["budgets"] = {
        "description": space["budgets"].get("description", ""),
        "anyOf": [
            sizes,
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["min", "max", "num"],
                "properties": {
                    "min": {"anyOf": [{"type": "number"}, SIZE_TEXT]},
                    "max": {"anyOf": [{"type": "number"}, SIZE_TEXT]},
                    "num": {"type": "integer", "minimum": 1},
                },
            },
        ],
    }
    space["seeds"] = {
        "description": space["seeds"].get("description", ""),
        "anyOf": [
            {"type": "integer", "minimum": 1},
            {"type": "array", "items": {"type": "integer"}},
        ],
    }
    space["depths"] = {"type": "array", "items": {"type": "integer", "minimum": 1}}
    properties["fit"]["properties"]["budgets"]["items"] = {"anyOf": [{"type": "number"}, SIZE_TEXT]}
    train = properties["train"]["properties"]
    train["lr"] = {
        "description": "a learning rate shared by every shape, or a search per shape",
        "anyOf": [{"type": "number"}, SIZE_TEXT, lr_search],
    }
    train.pop("lr_search", None)  # the resolved form of a search: spec.yaml, not a spec


def _accept_size_text(prop: dict[str, Any]) -> None:
    """A number field also takes YAML text such as 1e6 or 3M (the loader parses both)."""
    if prop.get("type") in ("number", "integer"):
        kind = prop.pop("type")
        prop["anyOf"] = [{"type": kind}, SIZE_TEXT]
    elif "anyOf" in prop and any(o.get("type") in ("number", "integer") for o in prop["anyOf"]):
        prop["anyOf"] = [*prop["anyOf"], SIZE_TEXT]


def main() -> None:
    json.dump(spec_schema(), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
