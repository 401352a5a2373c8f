"""Spec parsing: shipped specs, defaults, and every kind of bad input."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dwtune.cli import main
from dwtune.core.errors import InputError, InputErrors
from dwtune.core.spec import ExperimentSpec, load_spec, spec_from_dict

SPECS = sorted((Path(__file__).resolve().parents[2] / "search_spaces").glob("*.yaml"))
MINIMAL = {"name": "t", "space": {"depths": [1, 2], "budgets": [1e5, 1e6]}, "train": {"steps": 10}}


def with_changes(**sections) -> dict:
    raw = yaml.safe_load(yaml.safe_dump(MINIMAL))
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key].update(value)
        else:
            raw[key] = value
    return raw


def test_every_shipped_spec_loads_and_plans():
    assert {p.stem for p in SPECS} >= {"quickstart", "paper", "blog_50m", "simulated"}
    for path in SPECS:
        spec = load_spec(path)
        assert spec.grid(), path
        assert spec.source == str(path.resolve())


def test_spec_is_frozen_and_round_trips_through_its_resolved_dict():
    spec = load_spec(SPECS[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"
    again = spec_from_dict(yaml.safe_load(yaml.safe_dump(spec.to_dict())), source=spec.source)
    assert again == spec


def test_exponent_strings_are_accepted_deliberately():
    # PyYAML reads 3e-3 and 1e6 (no dot) as strings.
    raw = yaml.safe_load(
        "name: t\nspace: {depths: [1], budgets: [1e6, 50M]}\ntrain: {steps: 1e3, lr: 3e-3}\n"
    )
    assert raw["train"]["lr"] == "3e-3"
    spec = spec_from_dict(raw)
    assert spec.train.lr == 0.003 and spec.train.steps == 1000
    assert spec.space.budgets == (1e6, 5e7)


def test_log_spaced_budgets_include_both_ends():
    spec = spec_from_dict(with_changes(space={"budgets": {"min": "1e5", "max": "1e7", "num": 3}}))
    assert spec.space.budgets == (1e5, 1e6, 1e7)


def test_seed_count_expands_to_a_seed_list():
    assert spec_from_dict(with_changes(space={"seeds": 3})).space.seeds == (0, 1, 2)


BAD_INPUTS = [
    (with_changes(trian={"steps": 1}), "trian: unknown key; did you mean 'train'"),
    (with_changes(train={"stpes": 5}), "train.stpes: unknown key; did you mean 'steps'"),
    (with_changes(train={"batch_size": "many"}), "train.batch_size: got 'many'"),
    (with_changes(train={"lr": "fast"}), "train.lr: got 'fast'"),
    (with_changes(model={"tied_embeddings": "yes"}), "model.tied_embeddings: got 'yes'"),
    (with_changes(space={"depths": [0, 2]}), "space.depths: got 0"),
    (with_changes(space={"depths": []}), "space.depths: got an empty list"),
    (with_changes(space={"budgets": [-5]}), "space.budgets: got -5"),
    (with_changes(space={"budgets": [".inf"]}), "space.budgets"),
    (with_changes(space={"budgets": [float("nan")]}), "space.budgets"),
    (with_changes(space={"depths": [64], "budgets": [100]}), "too small for depth 64"),
    (with_changes(model={"heads": 0}), "model.heads: got 0"),
    (with_changes(refine={"pairs": [[1, 3]]}), "depth 3 in [1, 3] is not in space.depths"),
    (with_changes(refine={"pairs": [[2, 1]]}), "expected [shallower, deeper]"),
    (with_changes(refine={"tolerance": 0}), "refine.tolerance: got 0.0"),
    (with_changes(refine={"seeds": 0}), "refine.seeds: got 0"),
    (with_changes(resources={"gpu": 0.3}), "fractions must divide 1"),
    (with_changes(trainer="jax"), "trainer: got 'jax'"),
    (with_changes(train={"steps": 10, "tokens": 100}), "give exactly one"),
    ({"name": "t", "space": {"depths": [1], "budgets": [1e5]}}, "train: missing"),
    ([1, 2, 3], "expected a mapping"),
]


@pytest.mark.parametrize(("raw", "message"), BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_spec_values_name_the_field_and_fix(raw, message):
    with pytest.raises(InputError) as info:
        spec_from_dict(raw)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_every_problem_of_a_spec_is_reported_together_one_line_each():
    raw = with_changes(
        space={"deptsh": [1], "seeds": -1},
        train={"batch_size": 0, "lr": "x"},
        model={"heads": 0},
    )
    with pytest.raises(InputErrors) as info:
        spec_from_dict(raw)
    # sections in the spec's order; in a section unknown keys first, then values as given
    assert [str(error) for error in info.value.errors] == [
        "model.heads: got 0; expected a value >= 1",
        "space.deptsh: unknown key; did you mean 'depths'?",
        "space.seeds: got -1; expected a count >= 1 or a list of seeds",
        "train.batch_size: got 0; expected a value >= 1",
        "train.lr: got 'x'; expected a number such as 3e-3",
    ]


def test_a_section_changed_in_code_is_coerced_and_checked_as_the_loader_does():
    train = spec_from_dict(MINIMAL).train
    assert dataclasses.replace(train, steps="1e3").steps == 1000
    with pytest.raises(InputError, match=r"^train.steps: got 0; expected a value >= 1$"):
        dataclasses.replace(train, steps=0)
    assert dataclasses.asdict(train)["steps"] == 10


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("make_path", "message"),
    [
        (lambda tmp: tmp / "missing.yaml", "no such spec file"),
        (lambda tmp: tmp, "is a directory"),
        (lambda tmp: write(tmp, "name: t\nspace: [1, 2\n"), "YAML syntax error at line 3"),
        (
            lambda tmp: write(tmp, yaml.safe_dump(with_changes(data={"tokeniser": "bpe"}))),
            "did you mean 'tokenizer'",
        ),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys, make_path, message):
    assert main(["plan", str(make_path(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_flag_exits_2_with_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "dwtune", "plan", "--bogus", "x.yaml"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "unrecognized arguments: --bogus" in result.stderr
    assert "Traceback" not in result.stderr


def test_default_sections_are_filled_in():
    spec = spec_from_dict(MINIMAL)
    assert isinstance(spec, ExperimentSpec)
    assert spec.model.heads == 2 and spec.data.tokenizer == "char" and spec.trainer == "torch"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"train": {"beta1": 1.5}}, "train.beta1: got 1.5; expected 0.0 <= x <= 1.0"),
        ({"train": {"min_lr_ratio": -5}}, "train.min_lr_ratio: got -5.0"),
        ({"train": {"weight_decay": -1}}, "train.weight_decay: got -1.0"),
        ({"resources": {"gpu": float("nan")}}, "resources.gpu: got nan"),
        ({"space": {"seeds": [0, 0]}}, "space.seeds: got [0, 0]; expected distinct seeds"),
        ({"fit": {"reference": "bogus"}}, "fit.reference: got 'bogus'; expected one of levine2020"),
    ],
)
def test_optimizer_nan_seed_and_reference_values_are_checked(changes, message):
    with pytest.raises(InputError) as info:
        spec_from_dict(with_changes(**changes))
    assert message in str(info.value)


def test_a_relative_corpus_path_is_relative_to_the_spec_file(tmp_path, monkeypatch):
    (tmp_path / "specs").mkdir()
    (tmp_path / "corpus.txt").write_text("to be or not to be " * 100)
    path = tmp_path / "specs" / "s.yaml"
    path.write_text(yaml.safe_dump(with_changes(data={"corpus": "../corpus.txt"})))
    monkeypatch.chdir("/")
    assert load_spec(path).data.corpus == str(tmp_path / "corpus.txt")


# --------------------------------------------------------------------------- YAML aliases

BILLION_LAUGHS = "\n".join(
    ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
)


def test_alias_bomb_is_measured_once_per_node():
    from dwtune.core.spec.checks import measure

    shape = measure(yaml.safe_load(BILLION_LAUGHS), max_depth=32, max_values=100_000)
    assert shape.values == 100_001  # capped just above the limit: 9^9 strings named
    assert shape.depth == 10  # the mapping and nine lists


def test_shared_alias_within_the_limit_is_accepted():
    from dwtune.core.spec.checks import measure

    raw = yaml.safe_load("a: &d [6, 12]\nb: *d\n")
    assert measure(raw, max_depth=32) == measure({"a": [6, 12], "b": [6, 12]}, max_depth=32)


def test_alias_bomb_spec_file_is_one_line(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BILLION_LAUGHS)
    with pytest.raises(InputError, match="aliases"):
        load_spec(path)


def test_alias_bomb_override_is_one_line():
    bomb = "{" + ", ".join(BILLION_LAUGHS.splitlines()) + "}"
    with pytest.raises(InputError, match="override description: more than"):
        spec_from_dict({"name": "x"}, overrides=[f"description={bomb}"])


def test_self_containing_spec_is_too_deep(tmp_path):
    path = tmp_path / "cycle.yaml"
    path.write_text("name: &a [*a]\n")
    with pytest.raises(InputError, match="nested deeper"):
        load_spec(path)


# --------------------------------------------------------------------------- override types

QUICKSTART = Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.yaml"


@pytest.mark.parametrize("written", ["yes", "no", "on", "off", "1e3", "007"])
def test_an_override_of_a_text_field_keeps_its_value_as_written(written):
    spec = load_spec(QUICKSTART, [f"name=x{written}", f"description={written}"])
    assert spec.description == written
    assert spec.name == f"x{written}"


def test_an_override_named_yes_names_the_experiment_yes():
    assert load_spec(QUICKSTART, ["name=yes"]).name == "yes"


def test_an_override_of_a_number_field_is_still_a_number():
    spec = load_spec(QUICKSTART, ["train.steps=100", "train.compile=true"])
    assert spec.train.steps == 100
    assert spec.train.compile == "true"
