"""The generator way in: ``sqla-queue alembic install`` / ``update`` copy the queue's schema into
the host's own Alembic history, which stays linear, so the host's everyday commands
(``alembic revision --autogenerate``, ``alembic upgrade head``, ``downgrade -1``, ``check``)
work as before the queue was added. Real ``alembic`` and ``sqla-queue`` processes in a tmp dir."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from migration_helpers import HEAD_ID, PREVIOUS_ID, HostApp, job_round_trip, relations, schema_catalog
from sqlalchemy import Engine, create_engine

import sqla_queue as sq
from sqla_queue import migrations
from sqla_queue.migrations import host

QUIET = "No new upgrade operations detected."
PACKAGE_VERSIONS = Path(migrations.VERSION_LOCATION)
SHIPPED = [script.revision for script in migrations.script_directory().walk_revisions()]


@pytest.fixture
def engine(empty_url: str):
    engine = create_engine(empty_url)
    yield engine
    engine.dispose()


@pytest.fixture
def shipped_catalog(make_engine):
    """Factory: the queue's tables as the shipped revisions build them, up to `revision`."""

    def build(revision: str = migrations.HEAD) -> dict:
        other = make_engine()
        with other.connect() as conn:
            migrations.upgrade(conn, revision)
        return schema_catalog(other)

    return build


def versions(app: HostApp) -> set[str]:
    return {path.name for path in (app.root / "migrations" / "versions").glob("*.py")}


def package_files() -> set[str]:
    return {path.name for path in PACKAGE_VERSIONS.iterdir()}


def new_file(app: HostApp, before: set[str]) -> Path:
    (name,) = versions(app) - before
    return app.root / "migrations" / "versions" / name


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    return {name.split(".")[0] for name in names}


def marker(path: Path) -> str:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == host.MARKER for t in node.targets):
            return node.value.value
    raise AssertionError(f"no {host.MARKER} in {path}")


def queue_tables(catalog: dict) -> dict:
    return {name: value for name, value in catalog.items() if name in migrations.QUEUE_TABLES}


def test_the_whole_journey_keeps_the_hosts_history_linear(host_app, engine: Engine, shipped_catalog):
    app = host_app(queue_location=None, orders_revision=False)
    package_before = package_files()

    out = app.shell.run("sqla-queue alembic install").stdout
    installed = new_file(app, set())
    assert "alembic upgrade head" in out and installed.name.endswith("_install_sqla_queue_schema_" + HEAD_ID + ".py")
    assert imported_modules(installed) <= {"alembic", "sqlalchemy", "typing"}
    assert marker(installed) == HEAD_ID
    text = installed.read_text()
    assert all(f"# {revision}:" in text for revision in SHIPPED)  # every shipped revision, none named here
    assert "with op.get_context().autocommit_block():" in text and "postgresql_concurrently=True" in text

    app.shell.run("alembic upgrade head")
    assert migrations.QUEUE_TABLES <= relations(engine)
    before = versions(app)
    app.shell.run("alembic revision --autogenerate -m orders")
    orders = new_file(app, before)
    assert "op.create_table('orders'" in orders.read_text() and "sqla_queue" not in orders.read_text()
    assert f"down_revision: Union[str, Sequence[str], None] = {installed.name.split('_')[0]!r}" in orders.read_text()
    assert package_files() == package_before

    app.shell.run("alembic upgrade head")
    assert {"orders", *migrations.QUEUE_TABLES} <= relations(engine)
    assert queue_tables(schema_catalog(engine)) == queue_tables(shipped_catalog())
    assert QUIET in app.shell.run("alembic check").stdout
    assert app.shell.run("sqla-queue db current").stdout.strip() == f"{HEAD_ID} (head)"
    job_round_trip(sq.Queue(engine, load_entrypoints=False))

    app.shell.run("alembic downgrade -1")
    assert "orders" not in relations(engine) and migrations.QUEUE_TABLES <= relations(engine)
    app.shell.run("alembic downgrade -1")
    assert relations(engine) == set()
    assert app.shell.run("sqla-queue db current").stdout.strip() == "none"
    app.shell.run("alembic upgrade head")
    assert QUIET in app.shell.run("alembic check").stdout

    before = versions(app)
    app.shell.run("alembic revision -m 'plain revision'")  # no "Multiple heads are present"
    assert "plain_revision" in new_file(app, before).name
    app.shell.run("alembic upgrade head")
    assert package_files() == package_before


def test_update_brings_an_older_install_to_the_librarys_schema(host_app, engine: Engine, shipped_catalog):
    app = host_app(queue_location=None)
    app.shell.run(f"sqla-queue alembic install --to {PREVIOUS_ID}")
    app.shell.run("alembic upgrade head")
    assert queue_tables(schema_catalog(engine)) == queue_tables(shipped_catalog(PREVIOUS_ID))
    assert app.shell.run("sqla-queue db current").stdout.strip() == PREVIOUS_ID

    before = versions(app)
    app.shell.run("sqla-queue alembic update")
    update = new_file(app, before)
    assert marker(update) == HEAD_ID and f"# {HEAD_ID}:" in update.read_text()
    assert f"# {PREVIOUS_ID}:" not in update.read_text()
    app.shell.run("alembic upgrade head")
    assert queue_tables(schema_catalog(engine)) == queue_tables(shipped_catalog())
    assert app.shell.run("sqla-queue db current").stdout.strip() == f"{HEAD_ID} (head)"
    assert QUIET in app.shell.run("alembic check").stdout

    app.shell.run("alembic downgrade -1")
    assert queue_tables(schema_catalog(engine)) == queue_tables(shipped_catalog(PREVIOUS_ID))
    assert app.shell.run("sqla-queue db current").stdout.strip() == PREVIOUS_ID
    app.shell.run("alembic upgrade head")

    before = versions(app)
    result = app.shell.run("sqla-queue alembic update")
    assert "up to date" in result.stdout and versions(app) == before


def test_the_host_revision_sits_on_the_hosts_head(host_app):
    app = host_app(queue_location=None)  # host_0001 creates orders
    app.shell.run("sqla-queue alembic install --rev-id host_0002 -m 'job tables' --version-path migrations/versions")
    script = host.host_scripts(host.host_config(app.root / "alembic.ini")).get_revision("host_0002")
    assert script.down_revision == "host_0001" and Path(script.path).name == "host_0002_job_tables.py"
    assert app.shell.run("alembic heads").stdout.split() == ["host_0002", "(head)"]


def test_sqla_queue_db_upgrade_refuses_an_installed_project(host_app, engine: Engine):
    app = host_app(queue_location=None, orders_revision=False)
    app.shell.run("sqla-queue alembic install")
    refused = app.shell.run("sqla-queue db upgrade", check=False)  # before `alembic upgrade head`
    assert refused.returncode == 2 and "alembic upgrade head" in refused.stderr
    assert relations(engine) == set()
    app.shell.run("alembic upgrade head")
    (app.root / "alembic.ini").rename(app.root / "elsewhere.ini")
    for command in ("sqla-queue db upgrade", "sqla-queue db downgrade"):
        refused = app.shell.run(command, check=False)  # from the database alone
        assert refused.returncode == 2 and "alembic upgrade head" in refused.stderr, command
    unknown = app.shell.run("sqla-queue db current", check=False)
    assert unknown.returncode == 2 and "--config" in unknown.stderr
    shown = app.shell.run("sqla-queue db current --config elsewhere.ini").stdout.strip()
    assert shown == f"{HEAD_ID} (head)"


# -- refusals: a clear message, exit code 2, nothing written ---------------------------------


def refused(app: HostApp, command: str, words: str) -> None:
    before, package_before = versions(app), package_files()
    result = app.shell.run(command, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert words in result.stderr, result.stderr
    assert versions(app) == before and package_files() == package_before


def test_install_without_an_alembic_configuration(shell, tmp_path):
    result = shell.run("sqla-queue alembic install", check=False)
    assert result.returncode == 2 and "no Alembic configuration at alembic.ini" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_install_on_several_heads(host_app):
    app = host_app(queue_location=None)
    app.write("migrations/versions/host_0009_other.py", '''\
        revision = "host_0009"
        down_revision = None
        branch_labels = None
        depends_on = None


        def upgrade():
            pass


        def downgrade():
            pass
        ''')
    refused(app, "sqla-queue alembic install", "2 heads (")


def test_install_twice(host_app):
    app = host_app(queue_location=None)
    app.shell.run("sqla-queue alembic install")
    refused(app, "sqla-queue alembic install", "already in your history")


def test_install_into_a_history_with_the_queues_branch(host_app):
    app = host_app(queue_location=migrations.VERSION_RESOURCE)
    refused(app, "sqla-queue alembic install", "the two ways do not mix")
    refused(app, "sqla-queue alembic update", "the two ways do not mix")


def test_install_on_a_database_set_up_by_sqla_queue_db(host_app):
    app = host_app(queue_location=None)
    app.shell.run("sqla-queue db upgrade")
    refused(app, "sqla-queue alembic install", "from `sqla-queue db upgrade`")


def test_update_before_install_and_unknown_revisions(host_app):
    app = host_app(queue_location=None)
    refused(app, "sqla-queue alembic update", "run `sqla-queue alembic install`")
    refused(app, "sqla-queue alembic install --to sqlaq_9999", "'sqlaq_9999' is not a revision")
    app.shell.run(f"sqla-queue alembic install --to {HEAD_ID}")
    refused(app, f"sqla-queue alembic update --to {SHIPPED[-1]}", f"{SHIPPED[-1]} does not follow {HEAD_ID}")


def test_a_template_that_cannot_hold_the_revision(host_app):
    app = host_app(queue_location=None)
    app.write("migrations/script.py.mako", '''\
        revision = ${repr(up_revision)}
        down_revision = ${repr(down_revision)}
        ''')
    refused(app, "sqla-queue alembic install", "does not render ${imports}")
