"""Experiment trackers (issue 49): `--log-to` and the spec's `trackers` section, the one-line
error of a missing extra, and how each trial's run is named and grouped. No Ray here; the study
logged through Ray Tune's own callbacks is tests/study/test_trackers_ray.py."""

from __future__ import annotations

import sys

import pytest
import yaml

from dwtune.cli import main
from dwtune.core.errors import InputError
from dwtune.core.records import grid_requests, make_request
from dwtune.core.spec import spec_from_dict
from dwtune.study.pipeline import Study
from dwtune.study.trackers import Trackers, parse_log_to, run_group, run_tags
from tests.helpers.specs import small_simulated


def spec_file(tmp_path, raw: dict) -> str:
    path = tmp_path / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)


@pytest.mark.parametrize(
    ("values", "names"),
    [
        (["wandb"], ("wandb",)),
        (["wandb,mlflow"], ("wandb", "mlflow")),
        (["mlflow", "wandb"], ("mlflow", "wandb")),
        (["WandB , mlflow", "mlflow"], ("wandb", "mlflow")),  # once each, case and spaces
        ([], ()),
    ],
)
def test_log_to_takes_names_repeated_or_as_a_comma_list(values, names):
    assert parse_log_to(values) == names


def test_an_unknown_tracker_is_one_line_naming_the_choices(tmp_path, capsys):
    spec = spec_file(tmp_path, small_simulated(name="t"))
    assert main(["run", spec, "--log-to", "wandb,tensorboard", "--storage", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "dwtune run: error: --log-to: got 'tensorboard'; expected wandb or mlflow (repeat the "
        "flag or give a comma list: --log-to wandb,mlflow)\n"
    )
    assert not (tmp_path / "t").exists()  # refused before the experiment folder is made


@pytest.mark.parametrize("tracker", ["wandb", "mlflow"])
def test_a_missing_extra_is_one_line_naming_the_install(tracker, tmp_path, capsys, monkeypatch):
    """``sys.modules[name] = None`` is how Python marks a module unimportable: ``import``
    raises ImportError and ``importlib.util.find_spec`` answers None, as without the package."""
    monkeypatch.setitem(sys.modules, tracker, None)
    spec = spec_file(tmp_path, small_simulated(name="t"))
    assert main(["run", spec, "--log-to", tracker, "--storage", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"dwtune run: error: --log-to {tracker} needs the {tracker} extra; "
        f"pip install 'dwtune[{tracker}]'\n"
    )


def test_the_spec_key_names_itself_when_its_extra_is_missing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    spec = spec_from_dict(small_simulated(name="t", trackers={"log_to": ["mlflow"]}))
    with pytest.raises(InputError, match=r"^trackers.log_to mlflow needs the mlflow extra; pip"):
        Trackers.resolve(spec, tmp_path)


def test_the_spec_section_refuses_an_unknown_tracker_and_the_flag_adds_to_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(InputError, match=r"trackers.log_to: got 'neptune'; expected one of"):
        spec_from_dict(small_simulated(name="t", trackers={"log_to": ["neptune"]}))
    spec = spec_from_dict(
        small_simulated(name="t", trackers={"log_to": ["mlflow"], "project": "depths"})
    )
    trackers = Trackers.resolve(spec, tmp_path / "t", ["wandb"])
    assert trackers is not None and trackers.names == ("wandb", "mlflow")
    assert trackers.project == "depths"
    assert trackers.mlflow_uri == (tmp_path / "t" / "mlruns").as_uri()  # MLFLOW_TRACKING_URI unset
    assert Trackers.resolve(spec_from_dict(small_simulated(name="t")), tmp_path) is None


def test_the_local_runner_refuses_trackers(tmp_path):
    study = Study.from_dict(small_simulated(name="t"))
    with pytest.raises(InputError, match=r"^--log-to wandb: trials are logged through Ray"):
        study.run(storage=tmp_path, runner="local", log_to=["wandb"])


def test_the_seeds_of_a_cell_share_a_group_and_cells_do_not():
    spec = spec_from_dict(small_simulated(name="t", space={"seeds": 3}))
    requests = grid_requests(spec)
    groups: dict[str, set[int]] = {}
    for request in requests:
        groups.setdefault(run_group(request), set()).add(request.seed)
    cells = {(r.shape.depth, r.shape.width) for r in requests}
    assert len(groups) == len(cells) == 4 and all(seeds == {0, 1, 2} for seeds in groups.values())
    assert all(group.startswith("grid/L") for group in groups)
    refine = make_request(spec, requests[0].cell, 1, "refine", pair="6-12")
    assert run_group(refine) == f"refine/6-12/L6_w{refine.shape.width}"
    assert run_tags(refine)["dwtune.pair"] == "6-12" and run_tags(refine)["dwtune.seed"] == "1"
    assert "dwtune.pair" not in run_tags(requests[0])  # a grid trial asks for no pair
