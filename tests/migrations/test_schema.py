"""The revisions against real PostgreSQL: they build exactly the models' schema, undo it exactly,
and can be run again."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from migration_helpers import downgrade, relations, schema_catalog, stamped, upgrade
from sqlalchemy import Engine, event

import sqla_queue as sq
from sqla_queue import migrations

CHAIN = [s.revision for s in reversed(list(migrations.script_directory().walk_revisions()))]


def autogenerate_diff(engine: Engine) -> list:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return compare_metadata(context, sq.metadata)


def test_upgrade_heads_on_an_empty_database_matches_the_models_for_autogenerate(empty_engine):
    upgrade(empty_engine, "heads")
    assert autogenerate_diff(empty_engine) == []


def test_include_name_knows_every_table_the_revisions_create(empty_engine):
    upgrade(empty_engine, "heads")
    tables = set(schema_catalog(empty_engine))
    assert tables and tables <= migrations.QUEUE_TABLES
    assert not any(migrations.include_name(name, "table", {}) for name in tables)
    assert migrations.include_name("orders", "table", {})


def test_upgrade_heads_matches_the_models_in_the_catalog(make_engine):
    """Autogenerate ignores CHECK constraints and index predicates; the catalog does not."""
    migrated, created = make_engine(), make_engine()
    upgrade(migrated, "heads")
    sq.metadata.create_all(created)
    expected, actual = schema_catalog(created), schema_catalog(migrated)
    assert set(actual) == set(expected) == set(sq.metadata.tables)
    for table in expected:
        assert actual[table].columns == expected[table].columns, table
        assert actual[table].constraints == expected[table].constraints, table
        assert actual[table].indexes == expected[table].indexes, table
        assert all(valid for _definition, valid in actual[table].indexes.values()), table


def test_downgrade_base_leaves_nothing_behind(empty_engine):
    upgrade(empty_engine)
    assert relations(empty_engine)
    downgrade(empty_engine, migrations.BASE)
    assert relations(empty_engine) == set()
    assert stamped(empty_engine) == set()


def test_upgrade_downgrade_upgrade_ends_where_a_single_upgrade_does(make_engine):
    once, thrice = make_engine(), make_engine()
    upgrade(once)
    upgrade(thrice)
    downgrade(thrice, migrations.BASE)
    upgrade(thrice)
    assert schema_catalog(thrice) == schema_catalog(once)
    assert stamped(thrice) == {CHAIN[-1]}
    assert autogenerate_diff(thrice) == []


@pytest.mark.parametrize("revision", CHAIN[:-1])
def test_downgrading_to_a_revision_restores_exactly_its_schema(make_engine, revision):
    fresh, returned = make_engine(), make_engine()
    upgrade(fresh, revision)
    upgrade(returned)
    downgrade(returned, revision)
    assert schema_catalog(returned) == schema_catalog(fresh)
    assert stamped(returned) == {revision}


def test_revision_2_builds_and_drops_its_indexes_concurrently(empty_engine):
    upgrade(empty_engine, "sqlaq_0001")
    statements: list[str] = []
    event.listen(empty_engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    upgrade(empty_engine, "sqlaq_0002")
    built = [s for s in statements if "CREATE INDEX" in s]
    downgrade(empty_engine, "sqlaq_0001")
    dropped = [s for s in statements if "DROP INDEX" in s and s not in built]
    for name in ("sqla_queue_jobs_completed_at_idx", "sqla_queue_jobs_failed_at_idx"):
        assert any(s.startswith(f"CREATE INDEX CONCURRENTLY {name}") for s in built), built
        assert any("DROP INDEX CONCURRENTLY" in s and name in s for s in dropped), dropped
