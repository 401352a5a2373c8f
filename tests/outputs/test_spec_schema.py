"""The published JSON Schema of a spec (docs/spec.schema.json, issue 28): current, derived from
the loader's own sections, accepting every shipped spec and refusing what the loader refuses."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from dwtune.core.spec import load_spec
from dwtune.core.spec.load import SECTIONS, TOP_LEVEL
from dwtune.core.spec.sections import RefineConfig
from dwtune.outputs.spec_schema import field_comments, spec_schema

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "spec.schema.json"
SPECS = sorted((ROOT / "search_spaces").glob("*.yaml"))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = spec_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_published_schema_is_current():
    assert json.loads(PUBLISHED.read_text()) == spec_schema(), (
        "docs/spec.schema.json is stale: python -m dwtune.outputs.spec_schema > "
        "docs/spec.schema.json"
    )


def test_the_schema_has_exactly_the_keys_the_loader_accepts():
    schema = spec_schema()
    assert set(schema["properties"]) == set(TOP_LEVEL)
    for section, cls in SECTIONS.items():
        keys = set(schema["properties"][section]["properties"])
        accepted = {f for f in cls.__dataclass_fields__} - {"lr_search"}
        assert keys == accepted, section


@pytest.mark.parametrize("path", SPECS, ids=[p.name for p in SPECS])
def test_every_shipped_spec_validates_and_points_an_editor_at_the_schema(path, validator):
    raw = yaml.safe_load(path.read_text())
    assert [e.message for e in validator.iter_errors(raw)] == []
    assert path.read_text().startswith("# yaml-language-server: $schema=../docs/spec.schema.json")
    load_spec(path)  # and the loader agrees


def test_what_the_loader_refuses_by_key_or_choice_the_schema_refuses(validator):
    bad = {
        "name": "x",
        "trainer": "simulatd",
        "space": {"depths": [1, 2], "budgets": {"min": "1e5", "max": 1e6, "num": 3}, "seedz": 2},
        "train": {"steps": 10, "schedule": "cosin", "lr": {"search": "log", "trialz": 3}},
    }
    messages = sorted(e.message for e in validator.iter_errors(bad))
    assert any("'seedz' was unexpected" in m for m in messages)
    assert any("'cosin' is not one of" in m for m in messages)
    assert any("'simulatd' is not one of" in m for m in messages)
    assert any("is not valid under any of the given schemas" in m for m in messages)  # lr
    assert len(messages) == 4


def test_the_forms_the_loader_coerces_are_accepted(validator):
    good = {
        "name": "x",
        "space": {"depths": [1, 2], "budgets": ["3e5", 1e6, "2M"], "seeds": 3},
        "train": {"steps": "1e3", "lr": {"search": "log", "min": "1e-4", "max": 3e-2}},
        "fit": {"budgets": ["175B", 1e12]},
    }
    assert [e.message for e in validator.iter_errors(good)] == []


def test_field_comments_become_descriptions():
    comments = field_comments(RefineConfig)
    schema = spec_schema()["properties"]["refine"]["properties"]
    assert comments["max_rounds"] == schema["max_rounds"]["description"]
    assert "rounds" in comments["max_rounds"]
