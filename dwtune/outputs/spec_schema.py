"""The JSON Schema of a study spec, for editors: ``docs/spec.schema.json`` is its output.

Regenerate it with ``python -m dwtune.outputs.spec_schema > docs/spec.schema.json``; a test keeps
the published file in step. The schema is the spec sections' own (:mod:`dwtune.core.spec.sections`,
pydantic dataclasses whose field types carry the forms the loader coerces: sizes such as
``175B``, ``budgets: {min, max, num}``, a seed count), so it cannot drift from what the loader
accepts; here the comments beside each field become its description, and ``train.lr`` takes
its search mapping. The field rules (ranges, limits) stay the loader's, with its one-line
messages; the schema serves completion and hover in an editor (``# yaml-language-server:
$schema=...`` at the top of a spec).
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
    for section, cls in SECTIONS.items():
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
    """``train.lr``: a rate or a search mapping (the loader's ``lr_search`` is its resolved
    form, in spec.yaml, not a spec)."""
    train = properties["train"]["properties"]
    train["lr"] = {
        "description": "a learning rate shared by every shape, or a search per shape",
        "anyOf": [*train["lr"]["anyOf"], lr_search],
    }
    train.pop("lr_search", None)


def main() -> None:
    json.dump(spec_schema(), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
