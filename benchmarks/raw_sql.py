"""Every raw SQL statement of the benchmark, by name: the reference statements (the reference) and
the setup and measurement queries around them.

sqla_queue itself never runs these: the raw-SQL limit is the reference claim, guarded completion
and enqueue INSERT sent straight through psycopg (prepared) or pgbench (``-M prepared``), on the
same table, indexes and server as sqla_queue, so the ratio isolates what the library adds.

Placeholders are psycopg's ``%(name)s``; `pgbench_script` turns them into pgbench's ``:name``.
The only adaptations of the reference text: the table is ``sqla_queue_jobs`` (which also has a
``task`` column), the claim orders by ``priority DESC, run_at, id`` (the key order of the pending
index it walks, which serves priorities; ordered by ``run_at, id`` alone it would sort every
pending job of the queue), and the guarded completion takes the whole claimed batch at once
(``id = ANY(:ids)``, one statement and one commit per batch: "2 commits per batch", as measured
in DESIGN.md), each row still guarded by status and the claim's token. The claim's batch size is
written into the text (`inline_batch`) before it is prepared, as sqla_queue does: with ``LIMIT $n``
PostgreSQL's generic plan guesses a tenth of the table and it re-plans every execution, which
would make the denominator slower than the reference statement can be.
"""

from __future__ import annotations

import re

TABLE = "sqla_queue_jobs"
PENDING_INDEX = "sqla_queue_jobs_pending_claim_idx"
QUEUE = "bench"
TASK = "noop"

# -- the reference statements (the denominator) ----------------------------------------------------

_NEXT_JOB = f"""
next_job AS (
  SELECT id
  FROM {TABLE}
  WHERE queue_name = %(queue)s
    AND status = 'pending'
    AND run_at <= clock_timestamp()
    AND attempts < max_attempts
  ORDER BY priority DESC, run_at, id
  FOR UPDATE SKIP LOCKED
  LIMIT %(batch)s
)"""

_MARK_RUNNING = f"""
UPDATE {TABLE} AS j
SET status = 'running',
    attempts = j.attempts + 1,
    locked_at = clock_timestamp(),
    locked_by = %(worker)s,
    claim_token = %(token)s,
    last_error = NULL
FROM next_job
WHERE j.id = next_job.id
RETURNING j.id, j.payload, j.attempts, j.max_attempts, j.claim_token"""

CLAIM = f"WITH {_NEXT_JOB.strip()}{_MARK_RUNNING}"

COMPLETE = f"""
UPDATE {TABLE}
SET status = 'completed',
    completed_at = clock_timestamp(),
    locked_at = NULL,
    locked_by = NULL,
    claim_token = NULL
WHERE id = ANY(%(ids)s)
  AND status = 'running'
  AND claim_token = %(token)s
RETURNING id
"""

ENQUEUE_ONE = f"""
INSERT INTO {TABLE} (queue_name, task, payload)
VALUES (%(queue)s, %(task)s, %(payload)s)
RETURNING id
"""


def enqueue_rows(rows: int) -> str:
    """The reference INSERT with `rows` VALUES tuples (multi-row enqueue), payloads as parameters."""
    values = ",\n  ".join(f"(%(queue)s, %(task)s, %(p{i})s)" for i in range(rows))
    return f"INSERT INTO {TABLE} (queue_name, task, payload)\nVALUES\n  {values}\nRETURNING id"


# -- pgbench forms -----------------------------------------------------------------------------
# pgbench keeps no result sets between statements, so its claim hands the claimed ids to the
# completion through \gset: the same CTE and UPDATE, with the ids gathered into one array
# (data-modifying CTEs must be top level, hence a second CTE rather than a wrapper).

PGBENCH_CLAIM_AND_COMPLETE = (
    "\\set tok random(1, 9000000000000000)\n"
    f"WITH {_NEXT_JOB.strip()},\nclaimed AS ({_MARK_RUNNING}\n)\n"
    "SELECT coalesce(array_agg(id), '{}') AS ids FROM claimed\n\\gset\n"
    + COMPLETE.strip().replace("%(ids)s", "%(ids)s::bigint[]") + ";\n"
)


def inline_batch(sql: str, batch: int) -> str:
    """The claim with its LIMIT written in (one prepared statement per batch size)."""
    return sql.replace("%(batch)s", str(int(batch)))


def pgbench_script(sql: str) -> str:
    """psycopg placeholders to pgbench variables: ``%(name)s`` -> ``:name``."""
    script = re.sub(r"%\((\w+)\)s", r":\1", sql)
    # `token` in the reference statements is the random `tok` each script run draws.
    return script.replace(":token", ":tok")


def pgbench_enqueue_script(rows: int) -> str:
    if rows == 1:
        return pgbench_script(ENQUEUE_ONE.strip().replace("%(payload)s", "'{\"i\": 1}'")) + ";\n"
    # Literals, not variables: pgbench allows at most 256 variable references per command.
    values = ",\n  ".join(f"('{QUEUE}', '{TASK}', '{{\"i\": {i}}}')" for i in range(rows))
    return f"INSERT INTO {TABLE} (queue_name, task, payload)\nVALUES\n  {values}\nRETURNING id;\n"


# -- setup and measurement (not part of any measured path) --------------------------------------

RESET = f"TRUNCATE {TABLE} RESTART IDENTITY"
# The event-counters companion table exists from revision sqlaq_0003 on; emptied when present.
COUNTERS_TABLE = f"SELECT to_regclass('{TABLE}_counters') IS NOT NULL"
RESET_COUNTERS = f"TRUNCATE {TABLE}_counters"
# The workflows' edges (revision sqlaq_0012 on): emptied with the jobs, or a new job that reuses
# an id (RESTART IDENTITY) would collide with an old edge.
DEPENDENCIES_TABLE = f"SELECT to_regclass('{TABLE}_dependencies') IS NOT NULL"
RESET_DEPENDENCIES = f"TRUNCATE {TABLE}_dependencies"

# Retention, for the sustained drain's pruning variant when the library has no prune statement
# of its own: completed jobs that finished more than :age ago, oldest first, in bounded batches
# that skip rows another transaction holds.
PRUNE_COMPLETED = f"""
WITH doomed AS (
  SELECT id FROM {TABLE}
  WHERE status = 'completed' AND completed_at < now() - %(age)s
  ORDER BY completed_at
  LIMIT %(limit)s
  FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM {TABLE} AS j USING doomed WHERE j.id = doomed.id RETURNING j.id
)
SELECT count(*) FROM gone
"""

# Pending jobs as enqueue writes them (defaults for status, attempts, max_attempts), due now and
# spread over the last hour so ORDER BY run_at, id has real work to do.
FILL_PENDING = f"""
INSERT INTO {TABLE} (queue_name, task, payload, run_at)
SELECT %(queue)s, %(task)s, jsonb_build_object('i', g),
       now() - interval '1 hour' + (g * interval '1 hour') / %(n)s
FROM generate_series(1, %(n)s) AS g
"""

# Jobs as a steady stream of enqueues writes them: due now, in enqueue order (the sustained
# drain's feed, section 6).
FEED_PENDING = f"""
INSERT INTO {TABLE} (queue_name, task, payload)
SELECT %(queue)s, %(task)s, jsonb_build_object('i', g) FROM generate_series(1, %(n)s) AS g
"""

# Two queues of %(n)s pending jobs each, their rows interleaved, every job due and the jobs of
# each queue spread over the same hour: on %(plain)s every job at the default priority, on
# %(mixed)s each job at the next of %(priorities)s in turn (so every priority spans that hour).
FILL_PENDING_PRIORITIES = f"""
INSERT INTO {TABLE} (queue_name, task, payload, run_at, priority)
SELECT CASE WHEN mod(g, 2) = 0 THEN %(plain)s ELSE %(mixed)s END, %(task)s, jsonb_build_object('i', g),
       now() - interval '1 hour' + ((g / 2) * interval '1 hour') / %(n)s,
       CASE WHEN mod(g, 2) = 0 THEN 0
            ELSE (%(priorities)s::smallint[])[1 + mod(g / 2, cardinality(%(priorities)s::smallint[]))] END
FROM generate_series(0, 2 * %(n)s - 1) AS g
"""

# A finished history: completed jobs as a worker leaves them.
FILL_COMPLETED = f"""
INSERT INTO {TABLE} (queue_name, task, payload, status, run_at, attempts, locked_at, locked_by,
                     claim_token, completed_at)
SELECT %(queue)s, %(task)s, jsonb_build_object('i', g), 'completed',
       now() - interval '2 days', 1, now() - interval '2 days', 'history', md5(g::text),
       now() - interval '2 days' + interval '1 second'
FROM generate_series(1, %(n)s) AS g
"""

# Completed jobs that finished between %(newest)s + %(span)s and %(newest)s ago, spread evenly
# (retention's victims, or a week of kept history, section 17); %(archived)s: already in the
# history partitions of a partitioned table (their days' partitions must exist).
FILL_FINISHED_AGO = f"""
INSERT INTO {TABLE} (queue_name, task, payload, status, run_at, attempts, locked_at, locked_by,
                     claim_token, completed_at, archived)
SELECT %(queue)s, %(task)s, jsonb_build_object('i', g), 'completed', t.at - interval '1 second', 1,
       t.at - interval '1 second', 'history', md5(g::text), t.at, %(archived)s
FROM generate_series(1, %(n)s) AS g,
     LATERAL (SELECT now() - %(newest)s - %(span)s + (g * %(span)s) / (%(n)s + 1) AS at) AS t
"""

VACUUM_ANALYZE = f"VACUUM (ANALYZE) {TABLE}"
CHECKPOINT = "CHECKPOINT"
SET_TABLE_OPTIONS = f"ALTER TABLE {TABLE} SET (%s)"  # options: our own constants, see sustained
RESET_TABLE_OPTIONS = (
    f"ALTER TABLE {TABLE} RESET (fillfactor, autovacuum_vacuum_scale_factor, "
    "autovacuum_vacuum_threshold, autovacuum_vacuum_insert_scale_factor, "
    "autovacuum_vacuum_insert_threshold, autovacuum_vacuum_cost_delay, "
    "autovacuum_analyze_scale_factor, autovacuum_analyze_threshold)"
)

COUNT_BY_STATUS = f"SELECT status, count(*) FROM {TABLE} GROUP BY status"
COUNT_COMPLETED = f"SELECT count(*) FROM {TABLE} WHERE status = 'completed'"

# One drain, read back from the rows: how many finished, when the last one did, and how many
# claim statements it took (every job of one claim shares its token, which stays on the row).
DRAIN_RESULT = f"""
SELECT count(*) AS completed,
       max(completed_at) AS last_completed,
       count(DISTINCT claim_token) AS claims
FROM {TABLE}
WHERE status = 'completed'
"""

DB_CLOCK = "SELECT clock_timestamp()"

SERVER_COUNTERS = """
SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits,
       pg_current_wal_lsn() AS lsn
"""
OBSERVER = "sqlaq-bench-observer"
"""The application_name of a benchmark's own sampling connection (fleet's peak connections),
which stays open while the workers it watches exit."""
OTHER_BACKENDS = f"""
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
  AND application_name <> '{OBSERVER}'
"""
WAL_BYTES = "SELECT pg_wal_lsn_diff(%(end)s, %(start)s)::bigint"

EXPLAIN_CLAIM = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + CLAIM

TABLE_SIZES = f"""
SELECT pg_table_size('{TABLE}') AS table_bytes,
       pg_indexes_size('{TABLE}') AS indexes_bytes,
       pg_relation_size('{PENDING_INDEX}') AS pending_index_bytes,
       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.vacuum_count
FROM pg_stat_user_tables AS s
WHERE s.relid = '{TABLE}'::regclass
"""

# -- the peers (section 9): their own tables, read back after each run ----------------------------
# Each system's finished jobs as seconds after %(start)s (the database clock when the first worker
# process started): sqla_queue keeps completed_at on the row; pgqueuer deletes the job and logs
# the outcome, with its time, in pgqueuer_log. graphile-worker keeps no completion time.
PEER_COMPLETIONS = {
    "sqla_queue": f"SELECT extract(epoch FROM completed_at - %(start)s) FROM {TABLE} WHERE status = 'completed'",
    "pgqueuer": "SELECT extract(epoch FROM created - %(start)s) FROM pgqueuer_log WHERE status = 'successful'",
}
PEER_JOB_TABLES = {"sqla_queue": TABLE, "pgqueuer": "pgqueuer", "graphile-worker": "graphile_worker._private_jobs"}
PEER_COUNT = {system: f"SELECT count(*) FROM {table}" for system, table in PEER_JOB_TABLES.items()}
PEER_SETTLE = {system: f"VACUUM (ANALYZE) {table}" for system, table in PEER_JOB_TABLES.items()}
PEER_RESET = (
    "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics RESTART IDENTITY",
    "TRUNCATE graphile_worker._private_jobs, graphile_worker._private_job_queues RESTART IDENTITY CASCADE",
)
