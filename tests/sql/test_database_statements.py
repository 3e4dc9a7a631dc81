"""`sql.databases`: the tooling statements (the test bootstrap's CREATE/DROP DATABASE, the CLI's
"is the queue table there?"), compiled and run against real PostgreSQL."""

from __future__ import annotations

from sqlalchemy import column, create_engine, select, table
from sqlalchemy.dialects import postgresql

from sqla_queue.sql.databases import CreateDatabase, DropDatabase, relation_exists


def test_a_database_name_is_quoted_as_one_identifier():
    dialect = postgresql.dialect()
    assert str(CreateDatabase('odd "name"; drop').compile(dialect=dialect)) == 'CREATE DATABASE "odd ""name""; drop"'
    assert str(DropDatabase("plain").compile(dialect=dialect)) == "DROP DATABASE IF EXISTS plain WITH (FORCE)"


def test_create_and_drop_a_database_whose_name_needs_quoting(server_url):
    name = 'sqlaq odd "name"; select 1'
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    datnames = select(column("datname")).select_from(table("pg_database"))
    try:
        with admin.connect() as conn:
            conn.execute(CreateDatabase(name))
            assert name in conn.execute(datnames).scalars().all()
            conn.execute(DropDatabase(name))
            assert name not in conn.execute(datnames).scalars().all()
            conn.execute(DropDatabase(name))  # IF EXISTS: a second drop is no error
    finally:
        admin.dispose()


def test_relation_exists_finds_the_job_table_and_nothing_else(connection):
    assert connection.execute(relation_exists(), {"name": "sqla_queue_jobs"}).scalar() is True
    assert connection.execute(relation_exists(), {"name": "no_such_table"}).scalar() is False
