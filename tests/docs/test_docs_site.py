"""The documentation site (mkdocs.yml) builds with warnings as errors, and carries what it promises.

``mkdocs build --strict`` fails on any warning: a broken link or anchor, a page missing from the
nav, a docstring the API reference cannot render. The built site then has the API reference for
every public name, the command reference for every command, the root pages the docs link to, and
a search index. CONTRIBUTING.md's ``mkdocs serve`` command is run as written and serves the site.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import sqla_queue as sq
import sqla_queue.testing
from sqla_queue.cli.reference import help_texts
from waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Material's banner about MkDocs' future is noise in a test's output.
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                            cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + result.stderr + result.stdout
    return out


def page(site: Path, src: str) -> str:
    """The built HTML of a docs page, by its path in docs/ (directory URLs)."""
    return (site / src.removesuffix(".md") / "index.html").read_text()


def anchors(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


def test_the_site_builds_with_warnings_as_errors(site):
    assert (site / "index.html").exists()
    assert (site / "how-to" / "run-workers" / "index.html").exists()


def test_every_public_name_is_in_the_generated_api_reference(site):
    built = set().union(*(anchors(path.read_text()) for path in (site / "reference" / "api").rglob("index.html")))
    missing = [name for name in sq.__all__ if not {f"sqla_queue.{name}", f"sqla_queue.errors.{name}"} & built]
    missing += [f"testing.{name}" for name in sqla_queue.testing.__all__ if f"sqla_queue.testing.{name}" not in built]
    assert missing == [], "public names with no entry in docs/reference/api/ (add a ::: directive): " + ", ".join(missing)


def test_the_api_reference_shows_signatures_and_docstrings(site):
    html = page(site, "reference/api/queue.md")
    assert 'id="sqla_queue.Queue.enqueue"' in html
    assert "idempotency_key" in html  # from enqueue's docstring
    assert "claim_token" in html  # complete(job_id, claim_token, ...)'s signature


def test_the_command_reference_has_every_command(site):
    html = page(site, "reference/cli.md")
    missing = [path for path, _ in help_texts() if f"<code>{path}</code>" not in html]
    assert missing == []


def test_links_out_of_docs_reach_the_sites_copies_of_the_root_pages(site):
    assert 'href="../../contributing/#where-does-x-go"' in page(site, "reference/api.md")
    assert 'href="../../changelog/"' in page(site, "how-to/database-roles.md")
    readme = page(site, "readme.md")
    assert 'href="../tutorial/"' in readme and 'href="../contributing/"' in readme
    assert "where-does-x-go" in anchors(page(site, "contributing.md"))


def test_lists_render_as_on_github(site):
    changelog = page(site, "changelog.md")
    assert re.search(r"Seams for what comes next[^<]*<ul>\s*<li><code>Queue\(\.\.\., claim_order", changelog)
    scaling = page(site, "explanation/scaling.md")
    assert re.search(r"2 processes of\s+10\. For no-op jobs", scaling)


def test_search_indexes_the_pages_and_the_docstrings(site):
    index = json.loads((site / "search" / "search_index.json").read_text())
    locations = {doc["location"].split("#")[0] for doc in index["docs"]}
    assert {"how-to/run-workers/", "reference/api/queue/", "reference/cli/", "changelog/"} <= locations
    assert any("claim token" in doc["text"] for doc in index["docs"] if doc["location"].startswith("reference/api/"))


def hooks_module():
    spec = importlib.util.spec_from_file_location("docs_site_hooks", ROOT / "docs" / "_mkdocs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("github", "python_markdown"), [
    ("- a\n  - nested\n- b\n", "- a\n    - nested\n- b\n"),
    ("Text:\n- a\n- b\n", "Text:\n\n- a\n- b\n"),
    ("- more CPU than 2 processes of\n  10. For no-op jobs\n", "- more CPU than 2 processes of\n  10\\. For no-op jobs\n"),
    ("from -32768 to 32767, default\n0. Give it\n", "from -32768 to 32767, default\n0\\. Give it\n"),
    ("1. a\n2. b\n", "1. a\n2. b\n"),
    ("```\nText:\n- a\n  - b\n```\n", "```\nText:\n- a\n  - b\n```\n"),
])
def test_lists_are_rewritten_only_where_github_reads_them_otherwise(github, python_markdown):
    assert hooks_module()._github_lists(github) == python_markdown


@pytest.mark.parametrize(("markdown", "origin", "site"), [
    ("[c](../../CONTRIBUTING.md#where-does-x-go)", "docs/reference/api.md", "[c](../contributing.md#where-does-x-go)"),
    ("[r](run-workers.md#leases) ![i](../images/a.png)", "docs/how-to/x.md", "[r](run-workers.md#leases) ![i](../images/a.png)"),
    ("[t](docs/tutorial.md#start) [c](CONTRIBUTING.md)", "README.md", "[t](tutorial.md#start) [c](contributing.md)"),
    ("[the shop](examples/flask_shop/README.md)", "README.md", "the shop"),
    ("[the shop](../../examples/flask_shop/)", "docs/how-to/x.md", "the shop"),
    ("[gone](nope.md) [web](https://example.org/a.md)", "README.md", "[gone](nope.md) [web](https://example.org/a.md)"),
])
def test_links_are_rewritten_only_where_they_cross_the_edge_of_docs(markdown, origin, site):
    hooks = hooks_module()
    src_uri = hooks.ROOT_PAGES.get(origin, origin.removeprefix("docs/"))
    assert hooks.LINK.sub(lambda link: hooks._site_link(link, origin, src_uri), markdown) == site


def contributing_command(marker: str) -> str:
    """The line after ``<!-- ci: MARKER -->`` in CONTRIBUTING.md (fence lines skipped), as .ci/run reads it."""
    lines = (ROOT / "CONTRIBUTING.md").read_text().splitlines()
    after = lines[lines.index(f"<!-- ci: {marker} -->") + 1:]
    return next(line for line in after if not line.startswith("`"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_contributings_serve_command_serves_the_site():
    command = contributing_command("docs-serve")
    assert command == ".venv/bin/mkdocs serve"
    words = shlex.split(command)
    words[0] = str(BIN / Path(words[0]).name)  # this test's venv, wherever it is
    port = free_port()
    server = subprocess.Popen(words, cwd=ROOT, env={**ENV, "MKDOCS_DEV_ADDR": f"127.0.0.1:{port}"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def home() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/reference/api/queue/", timeout=5) as reply:
                    return reply.read().decode()
            except OSError:
                assert server.poll() is None, "mkdocs serve exited"
                return None

        html = wait_until(home, "mkdocs serve to serve the API reference", interval=0.5)
        assert 'id="sqla_queue.Queue.enqueue"' in html
    finally:
        server.terminate()
        server.wait(timeout=30)
