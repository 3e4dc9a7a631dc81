"""Release hygiene: one version (pyproject's) everywhere, a changelog that names every shipped
schema revision, and the licence file the metadata points to."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import sqla_queue as sq

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ROOT / "sqla_queue" / "migrations" / "versions"
SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
# SHA-256 of the Apache License 2.0 as published at https://www.apache.org/licenses/LICENSE-2.0.txt
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def changelog_text() -> str:
    """CHANGELOG.md without HTML comments: a placeholder does not count as an entry."""
    return re.sub(r"<!--.*?-->", "", (ROOT / "CHANGELOG.md").read_text(), flags=re.DOTALL)


def shipped_revisions() -> list[str]:
    ids = []
    for path in sorted(VERSIONS.glob("*.py")):
        match = re.search(r'^revision\s*=\s*"([^"]+)"', path.read_text(), flags=re.MULTILINE)
        if match:
            ids.append(match[1])
    return ids


def test_the_installed_version_is_pyprojects():
    assert metadata.version("sqla-queue") == pyproject()["version"]


def test_dunder_version_is_the_metadata_version():
    assert sq.__version__ == metadata.version("sqla-queue")


def test_cli_version_prints_the_metadata_version():
    result = subprocess.run([SCRIPT, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"sqla-queue {metadata.version('sqla-queue')}\n"


def test_changelog_lists_every_shipped_revision():
    revisions = shipped_revisions()
    assert len(revisions) >= 3  # the glob found the versions directory
    text = changelog_text()
    missing = [rev for rev in revisions if not re.search(rf"`{re.escape(rev)}`", text)]
    assert missing == [], f"CHANGELOG.md does not mention {missing}: add them under their version"


def test_changelog_names_no_revision_that_is_not_shipped():
    named = set(re.findall(r"`(sqlaq_\d{4})`", changelog_text()))
    assert named - set(shipped_revisions()) == set()


def test_changelog_has_a_section_for_the_current_version():
    headings = re.findall(r"^## (\S+)", changelog_text(), flags=re.MULTILINE)
    assert headings[0] == "Unreleased"
    assert pyproject()["version"] in headings


def test_license_file_is_the_complete_apache_2_0_text_the_metadata_names():
    project = pyproject()
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    license_text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(license_text).hexdigest() == APACHE_2_0_SHA256
    installed = metadata.metadata("sqla-queue")
    assert installed["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in installed.get_all("License-File")


def test_psycopg_binary_is_optional_for_the_library_and_in_the_fresh_machine_extras():
    project = pyproject()
    assert "psycopg>=3.2" in project["dependencies"]
    assert not any(dep.startswith("psycopg[") for dep in project["dependencies"])
    extras = project["optional-dependencies"]
    for extra in ("binary", "embedded", "test"):  # the README's two commands install embedded / test
        assert "psycopg[binary]>=3.2" in extras[extra], extra
