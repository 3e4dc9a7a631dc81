"""docs/index.md links every page in docs/, and every relative link in the docs and README resolves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(page.read_text()) if "://" not in t and not t.startswith("mailto:")]


def test_index_links_every_page():
    linked = {(DOCS / target).resolve() for target in relative_links(DOCS / "index.md")}
    pages = {p.resolve() for p in DOCS.rglob("*.md") if p.name != "index.md"}
    assert pages - linked == set()


def test_every_relative_link_resolves():
    broken = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in [ROOT / "README.md", *DOCS.rglob("*.md")]
        for target in relative_links(page)
        if not (page.parent / target).exists()
    ]
    assert broken == []
