"""User-facing text speaks the user's language: no words from how the project is run.

Readers of the docs, the READMEs, the CHANGELOG and the benchmark report never saw the design
notes or the issue tracker, so "the seed", "issue 7" or "helper-3" mean nothing to them.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INTERNAL = re.compile(r"(?i)\bthe seed\b|\bseed article\b|\bseed's\b|\bissue \d+\b|\bhelper-\d+\b|\bDESIGN\.md\b")


def user_pages() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *ROOT.glob("docs/**/*.md"),
             *ROOT.glob("plugins/*/README.md"), *ROOT.glob("examples/**/README.md")]
    return [page for page in pages if page.exists()]


def test_user_pages_have_no_internal_words():
    found = [
        f"{page.relative_to(ROOT)}:{number}: {match.group(0)!r}"
        for page in user_pages()
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        for match in INTERNAL.finditer(line)
    ]
    assert found == []


def test_the_pattern_catches_what_it_is_for():
    assert INTERNAL.search("measured against the seed's statements (issue 7)")
    assert not INTERNAL.search("an issue with the payload; seeded random jitter")
