"""Every code example in README.md and docs/*.md runs (issue 28).

- A ```python block is executed, in a folder where ``experiments/simulated/`` is a small simulated
  experiment (grid and refine trained in-process, no Ray; exported, fitted and reported) and
  ``search_spaces/`` is the repository's. A block that needs a whole study is marked on the line
  before it with ``<!-- doc-test: skip (why) -->``: it is skipped with that reason, listed, and at
  most MAX_SKIPPED blocks may be.
- A ```yaml block holding a spec (``name`` and ``space``) is validated as a spec; any other must
  parse as YAML.
- Every ``dwtune ...`` command of a ```bash block is parsed by the CLI's own parser, so an unknown
  flag or a value a flag's type refuses fails here.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from dwtune.cli import build_parser
from dwtune.core.spec import spec_from_dict
from tests.helpers.specs import small_simulated

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_SKIPPED = 3

FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
SKIP = re.compile(r"<!--\s*doc-test:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->\s*$")
SKIP_ANYWHERE = re.compile(r"^[ \t]*<!--\s*doc-test:\s*skip", re.M)  # a marker is a line


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    body: str
    skip: str | None  # the marker's reason

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = SKIP.search(before)
        line = text.count("\n", 0, match.start()) + 1
        lang, body = match["lang"], match["body"]
        found.append(Block(path, line, lang, body, marker["reason"] if marker else None))
    return found


ALL = [block for path in DOC_FILES for block in blocks(path)]
PYTHON = [b for b in ALL if b.lang == "python"]
YAML = [b for b in ALL if b.lang == "yaml"]
BASH = [b for b in ALL if b.lang in ("bash", "sh", "shell", "console")]


def dwtune_commands(script: str) -> list[list[str]]:
    """The argument lists of every ``dwtune`` invocation in a shell snippet."""
    joined = re.sub(r"\\\n", " ", script)  # continuation lines
    commands = []
    for line in joined.splitlines():
        for segment in re.split(r"&&|\|\||;|\||&", line):
            words = shlex.split(segment, comments=True)
            # `VAR=value dwtune ...`, `ray job submit ... -- dwtune ...`: from the word dwtune on
            if "dwtune" in words:
                commands.append(words[words.index("dwtune") + 1 :])
    return commands


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A folder holding ``experiments/simulated`` (a small simulated study, every output written)
    and ``search_spaces``, as the examples expect after ``dwtune run search_spaces/simulated.yaml``.
    """
    from dwtune import Study
    from dwtune.storage.store import ExperimentStore
    from dwtune.study.refine import refine_in_process

    root = tmp_path_factory.mktemp("docs")
    raw = small_simulated(
        name="simulated",
        space={"depths": [6, 12], "budgets": [3e6, 1e7, 3e7], "seeds": 2},
        refine={"pairs": [[6, 12]]},
    )
    spec = spec_from_dict(raw)
    storage = root / "experiments"
    refine_in_process(spec, ExperimentStore.for_spec(storage, spec))
    with contextlib.redirect_stderr(io.StringIO()):
        Study(spec).run(storage=storage)  # every trial recorded: no Ray; export, fit, report
    (root / "search_spaces").symlink_to(ROOT / "search_spaces")
    return root


def test_the_docs_hold_examples_of_every_kind():
    assert len(DOC_FILES) >= 10
    assert len(PYTHON) >= 3 and len(YAML) >= 2 and len(BASH) >= 5


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_python_example_runs(block: Block, workspace: Path, monkeypatch):
    if block.skip:
        pytest.skip(f"doc-test skip marker: {block.skip}")
    monkeypatch.chdir(workspace)
    code = compile(block.body, block.id, "exec")
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {"__name__": "__doc_example__"})


@pytest.mark.parametrize("block", YAML, ids=[b.id for b in YAML])
def test_yaml_example_parses(block: Block):
    raw = yaml.safe_load(block.body)
    if isinstance(raw, dict) and {"name", "space"} <= raw.keys():
        spec_from_dict(raw, source=block.id)


@pytest.mark.parametrize("block", BASH, ids=[b.id for b in BASH])
def test_dwtune_commands_in_shell_examples_parse(block: Block, capsys):
    parser = build_parser()
    for argv in dwtune_commands(block.body):
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            if exc.code not in (0, None):  # 0: --help or --version
                err = capsys.readouterr().err.strip()
                pytest.fail(f"{block.id}: `dwtune {shlex.join(argv)}` is refused: {err}")


def test_skipped_examples_are_few_and_each_has_a_reason(capsys):
    skipped = [b for b in ALL if b.skip]
    with capsys.disabled():
        print(f"\ndoc examples skipped ({len(skipped)} of {len(PYTHON)} python blocks):")
        for b in skipped:
            print(f"  {b.id}: {b.skip}")
    assert len(skipped) <= MAX_SKIPPED, [b.id for b in skipped]
    assert all(b.lang == "python" for b in skipped), "only python blocks are ever skipped"
    # A marker that precedes no block (or lacks its reason) is a mistake, never silently ignored.
    markers = sum(len(SKIP_ANYWHERE.findall(p.read_text())) for p in DOC_FILES)
    assert markers == len(skipped), "a doc-test skip marker without a block or a (reason)"


def test_dwtune_commands_are_found_in_shell_snippets():
    script = (
        "RAY_AUTH_MODE=token ray job submit --address http://h:8265 -- \\\n"
        "    dwtune run a.yaml --storage /x  # comment --bogus\n"
        "dwtune plan a.yaml | head -1 && python b.py\n"
    )
    assert dwtune_commands(script) == [["run", "a.yaml", "--storage", "/x"], ["plan", "a.yaml"]]
