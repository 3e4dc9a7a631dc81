"""The partitioned layout: finished jobs leave sqla_queue_jobs for day partitions of its history.

Revision ID: sqlaq_part_0001
Revises:
Create Date: 2026-12-05

Frozen: never edit this file once released; change the layout in a new revision of this branch.

An opt-in branch (``sqla_queue_partitioned``, docs/explanation/storage.md): it lives outside the
``sqla_queue`` branch's directory, so ``alembic upgrade heads`` applies it only where its
directory is listed in ``version_locations``. It depends on sqlaq_0014, which added the
partition key ``archived``.

Safe on a live queue, both ways. Each step runs in a transaction of its own (outside Alembic's),
gives up if it cannot get its lock within the lock timeout (``-x lock_timeout=10s``; default
`LOCK_TIMEOUT`) with nothing of it done, and is skipped when already done, so a failed upgrade
or downgrade is simply run again.

Upgrade: (1) a NOT VALID ``CHECK (archived IS FALSE)``, a catalog change; (2) its validation, a
scan under SHARE UPDATE EXCLUSIVE, which lets enqueues, claims and outcomes run; (3) the swap,
under ACCESS EXCLUSIVE for catalog changes only: the table becomes ``sqla_queue_jobs_live``, a
partitioned parent takes its name, its identity (ids go on where they were) and its grants, the
old table is attached as the live partition (the validated CHECK spares the scan) and the
history tree is created; (4) the day partitions around today. A table already converted (by
``sqla-queue db partition-history``) is only stamped.

Downgrade: (1) the swap back, under ACCESS EXCLUSIVE for catalog changes only: the live
partition is detached and takes the table's name, identity and the grants given on the parent;
the history is detached; (2) the archived jobs are moved back into the table in batches of
`COPY_BATCH` in id order, each committed on its own and starting past the last one's ids on the
history's id index, so no batch walks the rows its predecessors deleted (until a job's batch
arrives, readers do not find it);
(3) the emptied history is dropped. A worker that has not yet noticed cannot archive into the
plain table: the identity is GENERATED ALWAYS again and the CHECK stays (sqlaq_0014's
downgrade drops it with the column), so its insert, and with it its delete, is refused.
"""

import sqlalchemy as sa

from alembic import context, op

revision = "sqlaq_part_0001"
down_revision = None
branch_labels = ("sqla_queue_partitioned",)
depends_on = "sqlaq_0014"

TABLE = "sqla_queue_jobs"
LIVE = "sqla_queue_jobs_live"
HISTORY = "sqla_queue_jobs_history"
CHECK = "sqla_queue_jobs_live_archived"
STATES = (("completed", "completed_at"), ("failed", "failed_at"), ("cancelled", "cancelled_at"))
DAYS = (-1, 0, 1, 2)
"""Day partitions made around today (UTC); the workers keep the days ahead from then on."""
LOCK_TIMEOUT = "5s"
COPY_BATCH = 10_000

_KIND = f"(SELECT relkind FROM pg_class WHERE oid = to_regclass('{TABLE}'))"


def _step(condition: str, body: str, declare: str = "") -> str:
    """A DO block that runs `body` only while `condition` holds."""
    return f"DO $$\n{declare}BEGIN\n  IF NOT COALESCE({condition}, false) THEN RETURN; END IF;\n{body}\nEND $$"


def _copy_grants(source: str, target: str) -> str:
    """Grant on `target` what is granted on `source`, table-wide and per column, but the owner's:
    a statement through a partitioned table checks that table's privileges alone."""
    return f"""
  FOR g IN
    SELECT a.privilege_type AS privilege, NULL::name AS col, r.rolname AS role
    FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
    WHERE c.oid = '{source}'::regclass AND a.grantee <> c.relowner
    UNION ALL
    SELECT a.privilege_type, t.attname, r.rolname
    FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid CROSS JOIN LATERAL aclexplode(t.attacl) a
    LEFT JOIN pg_roles r ON r.oid = a.grantee
    WHERE t.attrelid = '{source}'::regclass AND t.attacl IS NOT NULL AND a.grantee <> c.relowner
  LOOP
    EXECUTE format('GRANT %s%s ON {target} TO %s', g.privilege,
                   CASE WHEN g.col IS NULL THEN '' ELSE format(' (%I)', g.col) END,
                   COALESCE(quote_ident(g.role), 'PUBLIC'));
  END LOOP;"""


def _history_tree() -> str:
    tree = [f"  CREATE TABLE {HISTORY} PARTITION OF {TABLE} FOR VALUES IN (true) PARTITION BY LIST (status);",
            f"  CREATE INDEX {HISTORY}_id_idx ON {HISTORY} (id);"]
    for state, finished_at in STATES:
        tree += [f"  CREATE TABLE {HISTORY}_{state} PARTITION OF {HISTORY} FOR VALUES IN ('{state}') "
                 f"PARTITION BY RANGE ({finished_at});",
                 f"  CREATE INDEX {HISTORY}_{state}_at_idx ON {HISTORY}_{state} ({finished_at});"]
    return "\n".join(tree)


ADD_CHECK = _step(f"{_KIND} = 'r'", f"""
  ALTER TABLE {TABLE} DROP CONSTRAINT IF EXISTS {CHECK};
  ALTER TABLE {TABLE} ADD CONSTRAINT {CHECK} CHECK (archived IS FALSE) NOT VALID;""")

VALIDATE_CHECK = _step(f"{_KIND} = 'r'", f"  ALTER TABLE {TABLE} VALIDATE CONSTRAINT {CHECK};")

SWAP = _step(f"{_KIND} = 'r'", f"""
  LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE;
  next_id := nextval(pg_get_serial_sequence('{TABLE}', 'id'));
  ALTER TABLE {TABLE} ALTER COLUMN id DROP IDENTITY;
  ALTER TABLE {TABLE} RENAME TO {LIVE};
  CREATE TABLE {TABLE} (LIKE {LIVE} INCLUDING DEFAULTS) PARTITION BY LIST (archived);
  EXECUTE format('ALTER TABLE {TABLE} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (START WITH %s)', next_id);
  ALTER TABLE {TABLE} ATTACH PARTITION {LIVE} FOR VALUES IN (false);
{_history_tree()}
{_copy_grants(LIVE, TABLE)}""", declare="DECLARE next_id bigint; g record;\n")

DAY_PARTITIONS = _step(f"{_KIND} = 'p'", f"""
  FOREACH state IN ARRAY ARRAY[{", ".join(f"'{s}'" for s, _ in STATES)}] LOOP
    FOREACH offset_days IN ARRAY ARRAY[{", ".join(map(str, DAYS))}] LOOP
      day := (now() AT TIME ZONE 'UTC')::date + offset_days;
      EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                     '{HISTORY}_' || state || '_p' || to_char(day, 'YYYYMMDD'), '{HISTORY}_' || state,
                     day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
    END LOOP;
  END LOOP;""", declare="DECLARE state text; offset_days int; day date;\n")

SWAP_BACK = _step(f"{_KIND} = 'p'", f"""
  LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE;
  next_id := nextval(pg_get_serial_sequence('{TABLE}', 'id'));
{_copy_grants(TABLE, LIVE)}
  ALTER TABLE {TABLE} DETACH PARTITION {LIVE};
  ALTER TABLE {TABLE} DETACH PARTITION {HISTORY};
  DROP TABLE {TABLE};
  ALTER TABLE {LIVE} RENAME TO {TABLE};
  EXECUTE format('ALTER TABLE {TABLE} ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', next_id);""",
                  declare="DECLARE next_id bigint; g record;\n")

COPY_BACK = _step(f"to_regclass('{HISTORY}') IS NOT NULL AND {_KIND} = 'r'", f"""
  SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
  FROM pg_attribute WHERE attrelid = '{TABLE}'::regclass AND attnum > 0 AND NOT attisdropped
    AND attname <> 'archived';
  LOOP
    EXECUTE format('WITH gone AS (DELETE FROM {HISTORY} WHERE id IN (SELECT id FROM {HISTORY} WHERE id > $1 '
                   'ORDER BY id LIMIT %s) RETURNING %s), put AS (INSERT INTO {TABLE} (%s, archived) '
                   'OVERRIDING SYSTEM VALUE SELECT %s, false FROM gone RETURNING id) '
                   'SELECT count(*), max(id) FROM put', {COPY_BATCH}, cols, cols, cols)
      INTO moved, last_id USING last_id;
    EXIT WHEN moved = 0;
    COMMIT;
  END LOOP;""", declare="DECLARE cols text; moved bigint; last_id bigint := -9223372036854775808;\n")

DROP_HISTORY = _step(f"to_regclass('{HISTORY}') IS NOT NULL AND {_KIND} = 'r' "
                     f"AND NOT EXISTS (SELECT FROM {HISTORY})",
                     f"  DROP TABLE {HISTORY};")


def upgrade() -> None:
    _run(ADD_CHECK, VALIDATE_CHECK, SWAP, DAY_PARTITIONS)


def downgrade() -> None:
    _run(SWAP_BACK, COPY_BACK, DROP_HISTORY)


def _run(*steps: str) -> None:
    """`steps` in autocommit, each its own transaction, under the session's lock timeout."""
    timeout = context.get_x_argument(as_dictionary=True).get("lock_timeout", LOCK_TIMEOUT)
    with op.get_context().autocommit_block():
        op.execute(sa.text("SELECT set_config('lock_timeout', :timeout, false)").bindparams(timeout=timeout))
        try:
            for step in steps:
                op.execute(step)
        finally:
            op.execute("RESET lock_timeout")
