"""The job table is declared once, in SQLAlchemy Core (`sqla_queue.tables`): the default table the
queue uses, `sq.Job` mapped onto that very Table, and `sq.JobMixin` for a host's own job table
all come from the same definitions, so a host's table is the default's under another name."""

from __future__ import annotations

import pytest
from sqlalchemy import MetaData
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.schema import CreateIndex, CreateTable

import sqla_queue as sq
from sqla_queue import tables


def _ddl(table) -> list[str]:
    """What ``create_all`` would run for `table`: its CREATE TABLE, then its indexes."""
    dialect = postgresql.dialect()
    return [str(CreateTable(table).compile(dialect=dialect)).strip(),
            *sorted(str(CreateIndex(index).compile(dialect=dialect)).strip() for index in table.indexes)]


def test_a_table_on_the_mixin_is_the_core_table_under_its_name():
    class Base(DeclarativeBase):
        metadata = MetaData(naming_convention=tables.NAMING_CONVENTION)

    class HostJob(sq.JobMixin, Base):
        __tablename__ = "host_jobs"

    core = tables.job_table("host_jobs", MetaData(naming_convention=tables.NAMING_CONVENTION))
    assert _ddl(HostJob.__table__) == _ddl(core)
    assert [c.name for c in HostJob.__table__.columns] == list(tables.job_columns())
    assert sorted(Base.metadata.tables) == sorted(core.metadata.tables)  # the companions too


def test_job_is_mapped_onto_the_table_the_queue_uses(database_url):
    assert sq.Job.__table__ is tables.jobs is sq.metadata.tables["sqla_queue_jobs"]
    assert sq.Queue(database_url, load_entrypoints=False).table is tables.jobs
    assert sq.Queue(database_url, load_entrypoints=False, model=sq.Job).table is tables.jobs


def test_a_model_that_is_not_a_job_table_is_refused(database_url):
    with pytest.raises(sq.ConfigurationError, match="JobMixin"):
        sq.Queue(database_url, load_entrypoints=False, model=object)


def test_every_public_name_is_there_on_first_use():
    assert {name: getattr(sq, name) is not None for name in sq.__all__} == dict.fromkeys(sq.__all__, True)
    assert set(sq.__all__) <= set(dir(sq))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        sq.Nope  # noqa: B018
