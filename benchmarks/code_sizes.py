"""Lines per module and per function (def to its last line, decorators included) under a folder.

python benchmarks/code_sizes.py dwtune/core/refine [--top 10]
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def functions(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            yield node.end_lineno - start + 1, f"{path}:{node.lineno} {node.name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args(argv)
    files = sorted(
        f for p in args.paths for f in (Path(p).rglob("*.py") if Path(p).is_dir() else [Path(p)])
    )
    modules = sorted(((len(f.read_text().splitlines()), str(f)) for f in files), reverse=True)
    funcs = sorted((item for f in files for item in functions(f)), reverse=True)
    print("modules:", *(f"  {n:5d} {name}" for n, name in modules[: args.top]), sep="\n")
    print("functions:", *(f"  {n:5d} {name}" for n, name in funcs[: args.top]), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
