"""Way in no. 2: a host application with its own Alembic history adds the queue's version
location and runs ``alembic upgrade heads``; and the hazard of forgetting that location."""

from __future__ import annotations

from pathlib import Path

import pytest
from migration_helpers import HEAD_ID, PREVIOUS_ID, job_round_trip, relations, stamped
from sqlalchemy import create_engine

import sqla_queue as sq
from sqla_queue import migrations

QUIET = "No new upgrade operations detected."


@pytest.fixture
def engine(empty_url):
    engine = create_engine(empty_url)
    yield engine
    engine.dispose()


@pytest.mark.parametrize("location", [migrations.VERSION_LOCATION, migrations.VERSION_RESOURCE])
def test_upgrade_heads_creates_the_hosts_tables_and_the_queues(host_app, engine, location):
    app = host_app(queue_location=location)
    app.shell.run("alembic upgrade heads")
    assert {"orders", "sqla_queue_jobs"} <= relations(engine)
    assert stamped(engine) == {"host_0001", HEAD_ID}
    assert QUIET in app.shell.run("alembic check").stdout
    heads = app.shell.run("alembic heads").stdout
    assert "host_0001 (head)" in heads and f"{HEAD_ID} (sqla_queue) (head)" in heads

    job_round_trip(sq.Queue(engine, load_entrypoints=False))


def test_the_queues_branch_goes_down_and_up_without_touching_the_hosts(host_app, engine):
    app = host_app(queue_location=migrations.VERSION_RESOURCE)
    app.shell.run("alembic upgrade heads")
    app.shell.run("alembic downgrade sqla_queue@-1")
    assert stamped(engine) == {"host_0001", PREVIOUS_ID}
    app.shell.run("alembic downgrade sqla_queue@base")
    assert "orders" in relations(engine) and "sqla_queue_jobs" not in relations(engine)
    assert stamped(engine) == {"host_0001"}
    app.shell.run("alembic upgrade heads")
    assert stamped(engine) == {"host_0001", HEAD_ID}
    assert QUIET in app.shell.run("alembic check").stdout


def test_pyproject_configuration_works_like_alembic_ini(host_app, engine):
    app = host_app(queue_location=None)
    (app.root / "alembic.ini").unlink()
    app.write("pyproject.toml", f"""\
        [tool.alembic]
        script_location = "%(here)s/migrations"
        prepend_sys_path = ["."]
        version_locations = ["%(here)s/migrations/versions", "{migrations.VERSION_RESOURCE}"]
        """)
    app.shell.run("alembic upgrade heads")
    assert stamped(engine) == {"host_0001", HEAD_ID}
    assert QUIET in app.shell.run("alembic check").stdout


def test_a_host_that_leaves_the_queues_metadata_out_needs_include_name(host_app):
    """Without sq.metadata in target_metadata autogenerate wants to drop the queue's table;
    the helper keeps it out of the comparison."""
    app = host_app(queue_location=migrations.VERSION_RESOURCE)
    app.shell.run("alembic upgrade heads")
    app.shell.env["HOST_TARGET"] = "own"
    noisy = app.shell.run("alembic check", check=False)
    assert noisy.returncode != 0
    assert "remove_table" in noisy.stderr + noisy.stdout and "sqla_queue_jobs" in noisy.stderr + noisy.stdout
    app.shell.env["HOST_INCLUDE_NAME"] = "1"
    assert QUIET in app.shell.run("alembic check").stdout


def test_an_env_without_the_queues_location_cannot_read_the_shared_version_table(host_app, engine):
    """The documented hazard: once sqlaq_* is stamped into alembic_version, every environment
    that reads that table must list the queue's location."""
    app = host_app(queue_location=migrations.VERSION_RESOURCE)
    app.shell.run("alembic upgrade heads")
    ini = (app.root / "alembic.ini").read_text()
    app.write("without-queue.ini", ini.replace(f" {migrations.VERSION_RESOURCE}", ""))
    for command in ("current", "upgrade heads", "check"):
        result = app.shell.run(f"alembic -c without-queue.ini {command}", check=False)
        assert result.returncode != 0, command
        assert f"Can't locate revision identified by '{HEAD_ID}'" in result.stdout + result.stderr, command
    assert stamped(engine) == {"host_0001", HEAD_ID}


def test_sqla_queue_db_reads_a_shared_table_but_leaves_upgrades_to_the_host(host_app):
    app = host_app(queue_location=migrations.VERSION_RESOURCE)
    app.shell.run("alembic upgrade heads")
    assert app.shell.run("sqla-queue db current").stdout.strip() == f"{HEAD_ID} (head)"
    refused = app.shell.run("sqla-queue db upgrade", check=False)
    assert refused.returncode == 2 and "alembic upgrade heads" in refused.stderr


def test_a_host_revision_may_depend_on_the_queues(host_app, engine):
    """A host revision that touches the queue's table declares ``depends_on``; Alembic then keeps
    only the host's row, so ``sqla-queue db current`` reads the host's history to find ours."""
    app = host_app(queue_location=migrations.VERSION_RESOURCE)
    app.write("migrations/versions/host_0002_receipts.py", HOST_DEPENDENT_REVISION.replace("HEAD_ID", HEAD_ID))
    app.shell.run("alembic upgrade heads")
    assert stamped(engine) == {"host_0002"}
    assert HEAD_ID in app.shell.run("alembic history").stdout
    with engine.connect() as conn:
        assert migrations.current(conn) is None and migrations.foreign_revisions(conn) == ["host_0002"]
    assert app.shell.run("sqla-queue db current").stdout.strip() == f"{HEAD_ID} (head)"
    deferred = app.shell.run("sqla-queue db current --config missing.ini", check=False)
    assert deferred.returncode == 2 and "pass --config" in deferred.stderr
    assert QUIET in app.shell.run("alembic check").stdout


def test_the_branch_way_journey_with_the_guard(host_app, engine):
    """The two traps of the branch way, with the commands that avoid them: the host's first
    revision would be written inside the installed package (the guard refuses), and the
    history has two heads (``--head=LABEL@head``, ``alembic upgrade heads``)."""
    app = host_app(queue_location=migrations.VERSION_RESOURCE, orders_revision=False)
    app.shell.env["HOST_GUARD"] = "1"
    package_before = {path.name for path in Path(migrations.VERSION_LOCATION).iterdir()}
    app.shell.run("alembic upgrade heads")
    trapped = app.shell.run("alembic revision --autogenerate -m orders", check=False)
    assert trapped.returncode != 0 and "inside the installed sqla_queue package" in trapped.stdout + trapped.stderr
    app.shell.run(
        "alembic revision --autogenerate -m init --head=base --branch-label hostapp "
        "--version-path migrations/versions"
    )
    (first,) = (app.root / "migrations" / "versions").glob("*_init.py")
    assert "op.create_table('orders'" in first.read_text()
    two_heads = app.shell.run("alembic upgrade head", check=False)
    assert two_heads.returncode != 0 and "Multiple head revisions" in two_heads.stdout + two_heads.stderr
    app.shell.run("alembic upgrade heads")
    assert QUIET in app.shell.run("alembic check").stdout
    app.shell.run("alembic revision -m later --head=hostapp@head")
    assert len(list((app.root / "migrations" / "versions").glob("*.py"))) == 2
    app.shell.run("alembic upgrade heads")
    app.shell.run("alembic downgrade hostapp@-1")
    assert stamped(engine) == {first.name.split("_")[0], HEAD_ID}
    assert app.shell.run("sqla-queue db current").stdout.strip() == f"{HEAD_ID} (head)"
    assert {path.name for path in Path(migrations.VERSION_LOCATION).iterdir()} == package_before


HOST_DEPENDENT_REVISION = '''\
"""Reporting reads the queue: needs the queue's table, hence depends_on."""

from alembic import op

revision = "host_0002"
down_revision = "host_0001"
branch_labels = None
depends_on = "HEAD_ID"


def upgrade():
    op.execute("GRANT SELECT ON sqla_queue_jobs TO PUBLIC")


def downgrade():
    op.execute("REVOKE SELECT ON sqla_queue_jobs FROM PUBLIC")
'''
