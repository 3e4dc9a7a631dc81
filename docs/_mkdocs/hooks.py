"""MkDocs hooks for the documentation site (mkdocs.yml): the markdown stays what GitHub renders.

- README.md, CONTRIBUTING.md and CHANGELOG.md live at the repository's root, outside docs/, and
  docs pages link to them as ``../CHANGELOG.md``: the site carries them as pages of its own, and
  each link that leaves docs/ for one of them (or, from them, points into docs/) is rewritten to
  the site's page, so the same relative links work on GitHub and on the site. A link to another
  file of the repository (an example's source) stays a link on GitHub and is plain text on the
  site, which does not carry that file.
- Lists are read as GitHub reads them: Python-Markdown nests a list item only when it is
  indented by four spaces and starts a list only after a blank line, where GitHub nests at two
  and lets a bullet (or ``1.``) interrupt a paragraph. `_github_lists` rewrites those two cases
  into the form Python-Markdown wants, and nothing else.
- docs/reference/cli.md is rendered from the click commands at build time
  (`sqla_queue.cli.reference`), so the site's command reference cannot drift from the commands
  even before the test that checks the file in the repository has run.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
ROOT_PAGES = {"README.md": "readme.md", "CONTRIBUTING.md": "contributing.md", "CHANGELOG.md": "changelog.md"}
"""Repository-root files the site carries, and their pages' paths in the site."""

CLI_PAGE = "reference/cli.md"
FENCE = re.compile(r"^\s*(```|~~~)")
ITEM = re.compile(r"^(?P<indent> *)(?:[-*+]|\d+\.) +\S")
INTERRUPTS = re.compile(r"^(?:[-*+]|1\.) +\S")
"""A list item that may interrupt a paragraph on GitHub (CommonMark): a bullet, or an ordered list
starting at 1."""
LINK = re.compile(r"(?P<image>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for name, page in ROOT_PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / name)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri == CLI_PAGE:
        from sqla_queue.cli.reference import render

        return render()
    origin = _origin_in_repository(page.file.src_uri)
    lines = []
    for line, fenced in _with_fences(markdown):
        if not fenced:
            line = LINK.sub(lambda link: _site_link(link, origin, page.file.src_uri), line)
        lines.append(line)
    return _github_lists("".join(lines))


def _with_fences(markdown: str):
    """Each line, and whether it belongs to a fenced code block (its fence lines included)."""
    fenced = False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
            yield line, True
        else:
            yield line, fenced


def _github_lists(markdown: str) -> str:
    """Rewrite the list lines GitHub and Python-Markdown read differently into the form that gives
    Python-Markdown GitHub's reading; every other line is left alone."""
    out: list[str] = []
    in_list = previous_is_text = False
    last_indent = 0
    for line, fenced in _with_fences(markdown):
        item = None if fenced else ITEM.match(line)
        if item:
            indent, bare = len(item["indent"]), line.lstrip(" ")
            starts_list = not in_list or indent > last_indent
            if starts_list and previous_is_text and not INTERRUPTS.match(bare):
                # GitHub reads "10. more" after a text line as the paragraph going on.
                line = re.sub(r"^( *\d+)\.", r"\1\\.", line)
                item = None
            else:
                if starts_list and not in_list and previous_is_text:
                    out.append("\n")  # GitHub lets a list interrupt a paragraph
                if in_list and 0 < indent < 4:
                    line = "    " + bare  # GitHub nests at two spaces, Python-Markdown at four
                in_list, last_indent = in_list or indent == 0, indent
        if line.strip() and not item and not line.startswith((" ", "\t")):
            in_list = False
        previous_is_text = not fenced and bool(line.strip()) and not line.lstrip().startswith(("#", "<", "|"))
        out.append(line)
    return "".join(out)


def _origin_in_repository(src_uri: str) -> str:
    """Where the page's markdown lives in the repository, relative to its root."""
    by_page = {page: name for name, page in ROOT_PAGES.items()}
    return by_page.get(src_uri, f"docs/{src_uri}")


def _site_link(link: re.Match[str], origin: str, src_uri: str) -> str:
    """The link as the site must write it: unchanged unless it crosses docs/'s edge. A link to
    a file of the repository the site does not carry (``examples/...``) keeps only its text;
    a link to nothing at all is left for the strict build to report."""
    target = link["target"]
    if "://" in target or target.startswith(("/", "mailto:")):
        return link[0]
    in_repository = posixpath.normpath(posixpath.join(posixpath.dirname(origin), target))
    if in_repository in ROOT_PAGES:
        site_path = ROOT_PAGES[in_repository]
    elif in_repository.startswith("docs/"):
        if origin.startswith("docs/"):
            return link[0]
        site_path = in_repository.removeprefix("docs/")
    elif (ROOT / in_repository).exists() and not link["image"]:
        return link["text"]
    else:
        return link[0]
    relative = posixpath.relpath(site_path, posixpath.dirname(src_uri) or ".")
    return f"{link['image']}[{link['text']}]({relative}{link['anchor'] or ''})"
