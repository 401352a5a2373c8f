"""CLI conventions: KEY=VALUE overrides, every spec error at once, did-you-mean, a closed pipe
is a quiet exit, --json on every command, results on stdout. No Ray: studies run with
``--runner local`` (the simulated backend in this process)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dwtune.cli import COMMANDS, build_parser, main
from dwtune.core.records import grid_requests
from dwtune.core.spec import load_spec
from tests.helpers.specs import small_simulated

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "search_spaces" / "paper.yaml"
# paper.yaml's long plan, made runnable here (without these its plan exits 3: no corpus)
RUNNABLE_PAPER = (str(PAPER), "data.corpus=shakespeare", "train.steps=10", "resources.gpu=0")


def spec_file(tmp_path: Path, raw: dict) -> str:
    path = tmp_path / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)


def ids(spec) -> set[str]:
    return {r.trial_id for r in grid_requests(spec)}


def test_overrides_change_the_resolved_spec_and_the_trial_identities(tmp_path):
    path = spec_file(tmp_path, small_simulated(name="ov"))
    plain = load_spec(path)
    changed = load_spec(path, ["train.steps=50", "space.seeds=3"])
    assert changed.train.steps == 50 and changed.space.seeds == (0, 1, 2)
    assert ids(changed).isdisjoint(ids(plain))  # train.steps is in every identity
    assert ids(load_spec(path, ["train.steps=50"])) == {
        r.trial_id for r in grid_requests(changed) if r.seed < 2
    }


def run_json(capsys, *argv: str) -> dict:
    code = main(["run", *argv, "--runner", "local", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_run_with_an_override_stores_the_resolved_spec_and_resumes(tmp_path, capsys):
    spec = spec_file(tmp_path, small_simulated(name="ov"))
    storage = str(tmp_path / "exp")
    argv = (spec, "train.steps=50", "--storage", storage, "--grid-only")
    first = run_json(capsys, *argv)
    folder = Path(first["experiment"])
    stored = yaml.safe_load((folder / "spec.yaml").read_text())
    assert stored["train"]["steps"] == 50 and first["trials"] == 8 and first["failed"] == 0
    records = {p.name: p.stat().st_mtime_ns for p in (folder / "trials").glob("*.json")}
    # An override after a flag is an override too; the same resolved spec resumes: no retraining.
    again = run_json(capsys, spec, "--storage", storage, "train.steps=50", "--grid-only")
    assert again["trials"] == 8
    assert {p.name: p.stat().st_mtime_ns for p in (folder / "trials").glob("*.json")} == records
    # Another value is another study: the folder refuses it, and a new name keeps both.
    assert main(["run", spec, "train.steps=60", "--storage", storage, "--runner", "local"]) == 2
    assert "holds a different spec (changed: train.steps)" in capsys.readouterr().err
    other = run_json(
        capsys, spec, "train.steps=60", "name=ov60", "--storage", storage, "--grid-only"
    )
    assert Path(other["experiment"]).name == "ov60" and other["trials"] == 8


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.stepz=5", "train.stepz: unknown key; did you mean 'steps'?"),
        ("trian.steps=5", "trian: unknown key; did you mean 'train'?"),
        ("train.steps=five", "train.steps: got 'five'"),
        ("train.steps", "override 'train.steps': expected KEY=VALUE such as train.steps=100"),
        ("name.x=1", "override name.x: name is 'ov', not a section"),
    ],
)
def test_a_bad_override_is_one_line_like_a_bad_yaml_key(tmp_path, capsys, override, message):
    spec = spec_file(tmp_path, small_simulated(name="ov"))
    assert main(["plan", spec, override]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("key", ["k" * 5000, "train." + "k" * 5000, "train.steps." + "k" * 5000])
def test_a_5000_character_key_is_elided_in_a_short_line(tmp_path, capsys, key):
    spec = spec_file(tmp_path, small_simulated(name="ov"))
    assert main(["plan", spec, f"{key}=1"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert len(line) < 400, len(line)
    assert f"({len(key):,} characters)" in line


def test_one_line_keeps_short_words_and_cuts_long_ones_in_the_middle():
    from dwtune.cli import one_line

    assert one_line("a: got 'x';\n expected y") == "a: got 'x'; expected y"
    cut = one_line(f"{'a' * 150}{'b' * 150}: unknown key")
    assert cut == f"{'a' * 100}…{'b' * 40} (300 characters): unknown key"


def test_three_spec_errors_are_reported_together_one_line_each(tmp_path, capsys):
    raw = small_simulated(name="bad")
    raw["train"] |= {"stepz": 400, "batch_size": "eight"}
    raw["data"]["seq_len"] = 1
    assert main(["plan", spec_file(tmp_path, raw)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("dwtune plan: error: ") for line in lines)
    joined = "\n".join(lines)
    assert "train.stepz: unknown key; did you mean 'steps'?" in joined
    assert "train.batch_size: got 'eight'" in joined
    assert "data.seq_len: got 1; expected a value >= 2" in joined


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["plna", "x"], "did you mean 'plan'?"),
        (["plan", str(PAPER), "--jsno"], "--jsno: did you mean '--json'?"),
        (["bench", "--device", "cdua"], "did you mean 'cuda'?"),
    ],
)
def test_bad_subcommands_flags_and_choices_get_a_did_you_mean(capsys, argv, hint):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert hint in err and len(err.strip().splitlines()) == 1


def test_top_level_help_describes_the_tool(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Command-line entry point" not in out
    assert "depth against width" in out and "KEY=VALUE" in out


def closed_early(*argv: str) -> subprocess.CompletedProcess:
    """The command with its stdout's reader gone before it writes (as `| head -1` is)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dwtune", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        text=True,
    )
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err)


@pytest.mark.parametrize(
    "argv",
    [
        ("plan", *RUNNABLE_PAPER),
        ("project", "--budget", "175B", "--json"),
        ("--print-completion", "zsh"),
    ],
    ids=["plan", "project-json", "completion"],
)
def test_a_closed_pipe_is_a_quiet_exit(argv):
    done = closed_early(*argv)
    assert done.returncode == 0 and "Traceback" not in done.stderr and done.stderr == ""


def test_plan_piped_to_head_exits_0_without_a_traceback():
    done = subprocess.run(
        [
            "bash",
            "-o",
            "pipefail",
            "-c",
            f"{sys.executable} -m dwtune plan {' '.join(RUNNABLE_PAPER)} | head -1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("paper: ")


# --------------------------------------------------------------------------- --json everywhere


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    """A finished small simulated study (grid, refine of one pair, fit, report), no Ray."""
    from dwtune.study.pipeline import Study

    tmp = tmp_path_factory.mktemp("json")
    raw = small_simulated(
        name="js",
        space={"budgets": [3e5, 1e6, 3e6, 1e7, 3e7]},
        refine={"pairs": [[6, 12]]},
    )
    return Study.from_dict(raw).run(storage=tmp, runner="local").root


@pytest.fixture(scope="module")
def tiny_torch_spec(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("torch")
    corpus = tmp / "c.txt"
    corpus.write_text("to be or not to be, that is the question\n" * 400)
    raw = {
        "name": "tiny",
        "data": {"corpus": str(corpus), "cache_dir": str(tmp / "cache"), "seq_len": 16},
        "model": {"heads": 2},
        "space": {"depths": [1], "budgets": [3e3], "seeds": 1},
        "train": {"steps": 2, "batch_size": 2, "eval_every": 1, "eval_batches": 1},
    }
    return spec_file(tmp, raw)


def json_commands(experiment: Path, spec: str, tmp: Path) -> dict[str, list[str]]:
    small = spec_file(tmp, small_simulated(name="jr"))
    table = tmp / "table.csv"
    table.write_text("depth,width,width_err\n12,300,5\n18,420,8\n24,590,6\n")
    tiny_bench = ["--depth", "1", "--width", "16", "--seq-len", "16", "--batch-size", "2"]
    tiny_bench += ["--vocab-size", "50", "--steps", "1", "--warmup", "1", "--results", "none"]
    png = str(tmp / "cc.png")
    return {
        "plan": ["plan", *RUNNABLE_PAPER],
        "prepare": ["prepare", spec, "--no-progress"],
        "train": ["train", spec, "--depth", "1", "--width", "16"],
        "bench": ["bench", *tiny_bench, "--device", "cpu"],
        "run": ["run", small, "--storage", str(tmp / "runs"), "--runner", "local"],
        "refine": ["refine", str(experiment), "--runner", "local"],
        "export": ["export", str(experiment)],
        "fit": ["fit", str(table)],
        "project": ["project", "--budget", "175B", "--depth", "96"],
        "report": ["report", str(experiment)],
        "analyze": ["analyze", str(experiment)],
        "coordcheck": ["coordcheck", spec, "--widths", "16,32", "--steps", "1", "--out", png],
    }


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_prints_one_json_document_with_json(
    command, experiment, tiny_torch_spec, tmp_path, capsys
):
    argv = json_commands(experiment, tiny_torch_spec, tmp_path)[command]
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    parsed = json.loads(captured.out)  # stdout holds the JSON document and nothing else
    assert isinstance(parsed, dict) and parsed


def test_plan_json_gives_corpus_and_packing_as_numbers(capsys):
    one_gpu = ["resources.gpu=0.5", "resources.workers_per_trial=1"]  # two trials a GPU
    assert main(["plan", str(PAPER), "--json", "--device", "h100", *one_gpu]) == 3
    plan = json.loads(capsys.readouterr().out)  # the plan, and why run would refuse it
    assert not plan["runnable"]
    assert [r["reason"] for r in plan["refusals"]] == ["corpus_missing", "does_not_fit"]
    assert [r["field"] for r in plan["refusals"]] == ["data.corpus", "resources.gpu"]
    corpus, packing = plan["corpus"], plan["packing"]
    assert isinstance(corpus, dict) and isinstance(corpus["tokens_per_trial"], int)
    assert corpus["missing"] in (True, False) and corpus["max_epochs"] > 0
    assert isinstance(packing, dict) and packing["gpu_memory_bytes"] > 0
    assert packing["largest_trial"]["bytes"] > 0 and packing["packed_per_gpu"] == 2
    assert plan["trainings"] == len(plan["cells"]) * len(plan["seeds"])


def test_run_prints_its_answer_on_stdout_and_progress_on_stderr(experiment, tmp_path, capsys):
    raw = yaml.safe_load((experiment / "spec.yaml").read_text())
    spec = spec_file(tmp_path, raw)
    storage = str(experiment.parent)
    assert main(["run", spec, "--storage", storage, "--runner", "local"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("pair 6-12 (SIMULATED): ")
    assert out.splitlines()[-1] == f"report: {experiment / 'report.md'}"
    assert "trial(s) recorded" in err and "report:" not in err


def test_run_json_lists_pairs_as_analyze_does(experiment, tmp_path, capsys):
    raw = yaml.safe_load((experiment / "spec.yaml").read_text())
    answer = run_json(capsys, spec_file(tmp_path, raw), "--storage", str(experiment.parent))
    assert "transitions" not in answer
    assert [pair["pair"] for pair in answer["pairs"]] == ["6-12"]
    assert {"status", "n_star", "statement"} <= set(answer["pairs"][0])


def completions(script: str, words: list[str], cwd: Path | None = None) -> list[str]:
    """What bash offers for the last word of ``words`` with ``script`` sourced."""
    line = " ".join(f'"{w}"' for w in words)
    probe = (
        f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
        'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; _shtab_dwtune; '
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["bash", "-c", probe], capture_output=True, text=True, timeout=60, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completion_offers_commands_flags_and_choices(tmp_path, capsys):
    assert main(["--print-completion", "bash"]) == 0
    script = tmp_path / "dwtune.bash"
    script.write_text(capsys.readouterr().out)
    assert completions(str(script), ["dwtune", "ana"]) == ["analyze"]
    assert set(completions(str(script), ["dwtune", ""])) == set(COMMANDS)
    assert "--runner" in completions(str(script), ["dwtune", "run", "a.yaml", "--run"])
    assert completions(str(script), ["dwtune", "run", "a.yaml", "--runner", ""]) == [
        "ray",
        "local",
    ]


@pytest.mark.parametrize(
    ("words", "offered"),
    [
        (["plan", "search_spaces/qu"], {"search_spaces/quick.yaml", "search_spaces/quiet/"}),
        (["run", "-q", "search_spaces/qui"], {"search_spaces/quick.yaml", "search_spaces/quiet/"}),
        (["analyze", "search_spaces/quiet/r"], {"search_spaces/quiet/runs.csv"}),
        (["report", "search_spaces/qu"], {"search_spaces/quiet/"}),
        (["refine", "search_spaces/"], {"search_spaces/quiet/"}),
        (["project", "search_spaces/q"], {"search_spaces/quiet/"}),
        (["fit", "search_spaces/quiet/"], {"search_spaces/quiet/runs.csv"}),
    ],
    ids=["spec", "spec-after-flags", "runs", "report-dir", "refine-dir", "project-dir", "fit"],
)
def test_bash_completion_offers_paths(tmp_path, capsys, words, offered):
    """SPEC and RUNS complete files and folders, EXPERIMENT_DIR folders only (a folder is
    offered with its slash, as `ls` completes it)."""
    assert main(["--print-completion", "bash"]) == 0
    script = tmp_path / "dwtune.bash"
    script.write_text(capsys.readouterr().out)
    (tmp_path / "search_spaces" / "quiet").mkdir(parents=True)
    (tmp_path / "search_spaces" / "quick.yaml").write_text("name: q\n")
    (tmp_path / "search_spaces" / "quiet" / "runs.csv").write_text("depth\n")
    got = completions(str(script), ["dwtune", *words], cwd=tmp_path)
    assert {word + ("/" if (tmp_path / word).is_dir() else "") for word in got} == offered


def test_a_bare_dwtune_prints_the_help(capsys):
    assert main([]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: dwtune") and all(command in out for command in COMMANDS)
    assert err == ""


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_and_argument_has_help_text(command):
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    silent = [a.dest for a in commands.choices[command]._actions if a.help is None]
    assert silent == []


def test_a_mistyped_choice_is_answered_with_the_plain_choices(capsys):
    assert main(["run", str(PAPER), "--runner", "lcoal"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("did you mean 'local'? (see --help)") and "Runner." not in err
    assert len(err.splitlines()) == 1
