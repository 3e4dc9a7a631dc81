"""The shipped revisions as files: one labelled branch, ordered ids, frozen, in the wheel."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from migration_helpers import REPO

from sqla_queue import migrations

VERSIONS = Path(migrations.VERSION_LOCATION)
PARTITIONED = Path(migrations.PARTITIONED_LOCATION)


def revision_files() -> list[Path]:
    return sorted(VERSIONS.glob("*.py"))


def every_revision_file() -> list[Path]:
    """Both branches': the ``sqla_queue`` chain and the opt-in partitioned layout."""
    return revision_files() + sorted(PARTITIONED.glob("*.py"))


def test_the_branch_has_one_base_one_head_and_readable_ordered_ids():
    script = migrations.script_directory()
    chain = [s.revision for s in reversed(list(script.walk_revisions()))]
    assert chain == [f"sqlaq_{n:04d}" for n in range(1, len(chain) + 1)]
    assert chain[:2] == ["sqlaq_0001", "sqlaq_0002"]
    assert script.get_bases() == ["sqlaq_0001"]
    assert script.get_heads() == [chain[-1]]
    assert script.get_revision(migrations.HEAD).revision == chain[-1]


def test_only_the_root_carries_the_branch_label():
    for rev in migrations.script_directory().walk_revisions():
        expected = (migrations.BRANCH_LABEL,) if rev.down_revision is None else None
        assert rev.module.branch_labels == expected, rev.revision


def test_the_partitioned_branch_is_one_labelled_chain_that_depends_on_the_main_one():
    scripts = migrations.all_scripts()
    chain = [s for s in scripts.walk_revisions() if s.revision.startswith("sqlaq_part_")]
    assert [s.revision for s in reversed(chain)] == [f"sqlaq_part_{n:04d}" for n in range(1, len(chain) + 1)]
    assert chain[-1].module.branch_labels == (migrations.PARTITIONED_LABEL,)
    assert chain[-1].dependencies == "sqlaq_0014"
    assert scripts.get_revision(migrations.PARTITIONED_HEAD).revision == chain[0].revision
    assert len(list(PARTITIONED.glob("*.py"))) == len(chain)


def test_file_names_start_with_their_revision_id():
    for rev in migrations.script_directory().walk_revisions():
        assert Path(rev.path).name.startswith(f"{rev.revision}_")
    assert len(revision_files()) == len(list(migrations.script_directory().walk_revisions()))


def test_revision_files_import_only_alembic_and_sqlalchemy():
    """Frozen history must not follow the models: importing them would change old revisions."""
    for path in every_revision_file():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module or "")
        roots = {name.split(".")[0] for name in imported}
        assert roots <= {"alembic", "sqlalchemy"}, f"{path.name} imports {sorted(imported)}"


def test_every_revision_has_a_downgrade_that_does_something():
    for path in every_revision_file():
        tree = ast.parse(path.read_text())
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        body = functions["downgrade"].body
        assert not all(isinstance(stmt, ast.Pass) for stmt in body), path.name


def test_indexes_after_the_first_revision_are_built_concurrently():
    """Revision 1 creates an empty table; later ones run on live queues, where a plain CREATE
    INDEX would block every enqueue and claim for the length of the build."""
    for path in revision_files()[1:]:
        tree = ast.parse(path.read_text())
        calls = [n for n in ast.walk(tree) if _is_op_call(n, "create_index", "drop_index")]
        in_autocommit = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.With) and any(_is_autocommit(item.context_expr) for item in block.items)
            for n in ast.walk(block)
        }
        for call in calls:
            options = {k.arg: k.value for k in call.keywords}
            concurrently = options.get("postgresql_concurrently")
            assert isinstance(concurrently, ast.Constant) and concurrently.value is True, path.name
            assert id(call) in in_autocommit, f"{path.name}: CONCURRENTLY outside autocommit_block()"


def _is_op_call(node: ast.AST, *names: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in names
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "op"
    )


def _is_autocommit(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "autocommit_block"


def test_the_maintainers_template_keeps_branch_labels_and_depends_on():
    template = (REPO / "alembic" / "script.py.mako").read_text()
    assert "branch_labels = ${repr(branch_labels)}" in template
    assert "depends_on = ${repr(depends_on)}" in template


def test_the_wheel_ships_the_revisions_and_the_bundled_environment(tmp_path: Path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(tmp_path)],
        check=True, capture_output=True, timeout=300,
    )
    [wheel] = tmp_path.glob("sqla_queue-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"sqla_queue/migrations/{p.parent.name}/{p.name}" for p in every_revision_file()}
    assert shipped <= names
    assert {"sqla_queue/migrations/env.py", "sqla_queue/migrations/script.py.mako"} <= names
