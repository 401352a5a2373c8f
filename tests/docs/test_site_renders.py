"""The built documentation site reads as written (issue 49).

`mkdocs build --strict` passes on a page whose ``N*`` Markdown read as the start of an italic
run, and on an API page that shows a docstring's Sphinx role (``:meth:`run```) as text. Both are
caught here in the built HTML: an ``<em>`` that opens right after a letter or closes right before
one (``N<em>``: an asterisk inside a word, never intended emphasis), and a role next to code.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CODE = re.compile(r"<(pre|code)\b[^>]*>.*?</\1>", re.S)
STRAY_EM = re.compile(r"\w<em>|</em>\w")
RAW_ROLE = re.compile(r":(?:meth|class|func|attr|mod|data|obj|exc|ref):(?:<code|`)")


def stray_markup(html: str) -> list[str]:
    """Each stray emphasis and raw role of one page, with the text around it."""
    text = CODE.sub(lambda m: "<code>" if m[1] == "code" else "<pre/>", html)
    found = []
    for pattern, kind in ((STRAY_EM, "stray emphasis"), (RAW_ROLE, "raw role")):
        for match in pattern.finditer(text):
            around = re.sub(r"<[^>]+>", "", text[match.start() - 60 : match.end() + 40])
            found.append(f"{kind}: ...{' '.join(around.split())}...")
    return found


@pytest.mark.parametrize(
    ("html", "kinds"),
    [
        ("<p>far from every N<em>. Then </em>no prediction</p>", ["stray emphasis"] * 2),
        ("<p>only by :meth:<code>Study.run</code></p>", ["raw role"]),
        ("<p>the <em>difference</em>, not <code>a*b*c</code>; (<em>no prediction</em>)</p>", []),
        ("<pre><code>x = :meth:`run` N<em></code></pre>", []),
    ],
    ids=["asterisk-in-word", "sphinx-role", "intended", "inside-code"],
)
def test_checker_tells_stray_markup_from_intended(html, kinds):
    assert [found.split(":")[0] for found in stray_markup(html)] == kinds


def test_built_site_has_no_stray_emphasis_or_raw_roles(tmp_path):
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10
    problems = [
        f"{page.relative_to(site)}: {found}"
        for page in pages
        for found in stray_markup(page.read_text())
    ]
    assert not problems, "\n".join(problems)
