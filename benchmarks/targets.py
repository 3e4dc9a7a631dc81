"""The speed targets, judged against one run's results."""

from __future__ import annotations

from .peers import IMPORT_FLOOR, RAW_FOR
from .stats import ratio


def _get(mapping: dict, key):
    """Results come as built (int keys) or back from JSON (str keys)."""
    if key in mapping:
        return mapping[key]
    return mapping.get(str(key))


def raw_limit(results: dict, batch: int) -> tuple[float | None, str]:
    """The raw-SQL limit at `batch`: the best median over methods and client counts."""
    best, label = None, ""
    for method, per_c in (results.get("raw") or {}).get("claim", {}).items():
        for clients, per_b in per_c.items():
            stat = _get(per_b, batch)
            if stat and stat["median"] is not None and (best is None or stat["median"] > best):
                best, label = stat["median"], f"{method}, {clients} client{'s' if int(clients) > 1 else ''}"
    return best, label


def raw_enqueue_limit(results: dict, rows: int) -> tuple[float | None, str]:
    best, label = None, ""
    for method, per_r in (results.get("raw") or {}).get("enqueue", {}).items():
        stat = _get(per_r, rows)
        if stat and stat["median"] is not None and (best is None or stat["median"] > best):
            best, label = stat["median"], method
    return best, label


def drain_ratios(results: dict) -> list[dict]:
    """Each drain against the raw-SQL limit at the batch size it used (rounded): the raw runs
    paired with the drain's repetitions when there are any, else the raw section's figure."""
    out = []
    for key, d in (results.get("drain") or {}).items():
        batch = max(1, round(d["batch"]["median"])) if d["batch"]["median"] else None
        limit, label = raw_limit(results, batch) if batch else (None, "")
        paired = d.get("raw_paired")
        if paired:
            best = max(paired["clients"].items(), key=lambda kv: kv[1]["median"] or 0)
            limit = best[1]["median"]
            label = f"{paired['method']}, {best[0]} client{'s' if int(best[0]) > 1 else ''}, paired"
        same = _get(paired["clients"], d["processes"]) if paired else None
        same_limit = same["median"] if same else None
        out.append({"key": key, "processes": d["processes"], "concurrency": d["concurrency"],
                    "rate": d["jobs_per_s"]["median"], "batch": batch, "limit": limit,
                    "limit_label": label, "ratio": ratio(d["jobs_per_s"]["median"], limit),
                    "same_connections_limit": same_limit,
                    "same_connections_ratio": ratio(d["jobs_per_s"]["median"], same_limit)})
    return out


def evaluate(results: dict) -> list[dict]:
    """``[{"target", "measured", "ratio", "met", "note"}]``; ``met`` is None when not measured."""
    rows = []
    drains = {d["key"]: d for d in drain_ratios(results)}
    for key, floor in (("1x10", 6_000), ("2x10", 10_000)):
        d = drains.get(key)
        procs = key.split("x")[0]
        rows.append(_row(f"Drain, {procs} process{'es' if procs != '1' else ''} x concurrency 10 >= {floor:,} jobs/s",
                         d and d["rate"], d and ratio(d["rate"], floor), lambda r: r >= 1, "{:,.0f} jobs/s",
                         why=_why_floor(d, floor)))
    worst = min((d for d in drains.values() if d["ratio"] is not None), key=lambda d: d["ratio"], default=None)
    same = [d["same_connections_ratio"] for d in drains.values() if d["same_connections_ratio"] is not None]
    rows.append(_row(
        "Drain at any batch size >= 60 % of the raw-SQL limit at that batch size",
        worst and worst["ratio"], worst and worst["ratio"], lambda r: r >= 0.6, "{:.0%} (worst)",
        note=worst and (f"worst: {worst['processes']} proc x conc {worst['concurrency']} at batch {worst['batch']}"
                        + (f"; against raw with as many connections as worker processes, worst {min(same):.0%}"
                           if same else "")),
        why=_why_raw_share(results, worst)))
    enqueued = results.get("enqueue") or {}
    many = enqueued.get("many_1000", {}).get("median")
    rows.append(_row("enqueue_many(1,000) >= 60,000 jobs/s", many, ratio(many, 60_000), lambda r: r >= 1,
                     "{:,.0f} jobs/s", why=_why_enqueue_many(results, many)))
    single = enqueued.get("single", {}).get("median")
    raw_single, label = raw_enqueue_limit(results, 1)
    slower = ratio(raw_single, single)
    rows.append(_row("Single enqueue within 1.5x of the raw single-row INSERT", slower, slower,
                     lambda r: r <= 1.5, "{:.2f}x slower", note=f"raw: {label}" if label else None,
                     why=_why_single_enqueue(results, single)))
    lat = results.get("latency") or {}
    for key, limit in (("p50_ms", 3.0), ("p99_ms", 10.0)):
        value = lat.get(key, {}).get("median")
        rows.append(_row(f"Idle wake-up latency {key[:3]} <= {limit:g} ms", value, ratio(value, limit),
                         lambda r: r <= 1, "{:.2f} ms", why=_why_wakeup_latency(results, key)))
    cost = results.get("claim_cost")
    growth = cost and ratio(cost["large"]["ours_us"]["median"], cost["small"]["ours_us"]["median"])
    backlogs = (f"{cost['large']['backlog']:,} pending within 1.3x of {cost['small']['backlog']:,}" if cost
                else "a large backlog within 1.3x of a small one")
    rows.append(_row(f"Claim cost at {backlogs}", growth, growth, lambda r: r <= 1.3, "{:.2f}x",
                     why=WHY_CLAIM_COST))
    rows.append(priorities_row(results))
    default = (results.get("sustained") or {}).get("default", {})
    keep = default.get("last_over_first", {}).get("median")
    rows.append(_row("Sustained drain: last window >= 80 % of the first (default table)", keep, keep,
                     lambda r: r >= 0.8, "{:.0%}",
                     note="run stopped at the time cap" if default.get("capped") else None,
                     why=WHY_SUSTAINED))
    rows.append(fed_sustained_row(results))
    return rows + cpu_rows(drains, results) + asyncio_rows(results) + [wakeups_row(results)] + peer_rows(results)


def cpu_rows(drains: dict, results: dict) -> list[dict]:
    """CPU per job of section 3's 1 x 10 drain: the worker processes' and PostgreSQL's."""
    d = (results.get("drain") or {}).get("1x10") if "1x10" in drains else None
    cores = ((results.get("meta") or {}).get("facts") or {}).get("cores")
    rows = []
    for side, field, limit in (("Client (worker)", "client_cpu_us_per_job", 45), ("Server", "server_cpu_us_per_job", 55)):
        value = d and d[field]["median"]
        rows.append(_row(f"{side} CPU per job, drain 1 process x concurrency 10 <= {limit} µs", value,
                         ratio(value, limit), lambda r: r <= 1, "{:.0f} µs",
                         why=_why_cpu(drains.get("1x10"), d, cores)))
    return rows


def _why_cpu(drain: dict | None, figures: dict | None, cores: int | None) -> str | None:
    """The drain's CPU beside the raw reference's at its batch size: how much of this machine's
    CPU the same statements take per job when a C client (pgbench) sends them."""
    if not (drain and figures and drain["limit"] and cores):
        return None
    client, server = figures["client_cpu_us_per_job"]["median"], figures["server_cpu_us_per_job"]["median"]
    return (f"The 1 x 10 drain claimed {drain['batch']} jobs per statement; its worker spent {client:.0f} µs and "
            f"PostgreSQL {server:.0f} µs of CPU per job. At that batch size the raw reference "
            f"({drain['limit_label']}) ran at {drain['limit']:,.0f} jobs/s, at most "
            f"{cores * 1e6 / drain['limit']:.0f} µs of this machine's {cores} cores per job, server and client together.")


def fed_sustained_row(results: dict) -> dict:
    """The issue's sustained drain: jobs enqueued at the measured drain rate while they drain."""
    from .sustained import FED

    found = (results.get("sustained") or {}).get(FED, {})
    keep = found.get("last_over_first", {}).get("median")
    jobs = found.get("fed")
    label = f"{jobs:,} jobs" if jobs else "1,000,000 jobs"
    return _row(f"Sustained drain of {label} enqueued at the measured drain rate: last window >= 90 % of the first "
                "(default settings, no manual VACUUM)", keep, keep, lambda r: r >= 0.9, "{:.0%}",
                note="run stopped at the time cap" if found.get("capped") else None)


def wakeups_row(results: dict) -> dict:
    """Enqueue throughput with wake-ups on against off, 32 enqueuers at once: the worse layout."""
    layouts = ((results.get("wakeups") or {}).get("layouts") or {}).items()
    ratios = {name: ratio(v["on"]["median"], v["off"]["median"]) for name, v in layouts}
    ratios = {name: r for name, r in ratios.items() if r is not None}
    worst = min(ratios.items(), key=lambda kv: kv[1], default=None)
    return _row("Enqueue with wake-ups on >= 90 % of wake-ups off, 32 concurrent single-job enqueuers",
                worst and worst[1], worst and worst[1] / 0.9, lambda r: r >= 1, "{:.0%} (worst)",
                note=worst and f"worst layout: {worst[0]}", why=_why_wakeups(ratios))


# The priorities the claim-cost section puts in use (each pending job takes the next in turn);
# named in its target, whose wording stays the same whatever was measured.
CLAIM_PRIORITIES = (-1, 0, 5)
PRIORITIES_TARGET = (f"Claim cost at the large backlog with priorities {'/'.join(map(str, CLAIM_PRIORITIES))} in use "
                     "within 1.2x of the same backlog at one priority, same run")


def priorities_row(results: dict) -> dict:
    """Claim cost with priorities in use against the same backlog at one priority, measured in
    alternation in the same run: the median of the per-repetition ratios."""
    p = (results.get("claim_cost") or {}).get("priorities") or {}
    value = _median(p, "ratio")
    note = p and f"{p['backlog']:,} pending: " + _pair_note_us(_median(p["mixed"], "ours_us"),
                                                               _median(p["plain"], "ours_us"))
    return _row(PRIORITIES_TARGET, value, value, lambda r: r <= 1.2, "{:.2f}x", note=note or None,
                why=WHY_PRIORITIES)


def _pair_note_us(mixed: float | None, plain: float | None) -> str:
    if mixed is None or plain is None:
        return "–"
    return f"{mixed:,.0f} µs with priorities, {plain:,.0f} µs without"


# The asyncio section's enqueue pairs: each async figure against the sync one on the same kind
# of engine (a Queue's own engines from a URL take the driver fast path; an application's don't).
ENQUEUE_ENGINES = {"url": "Queue(URL)", "engine": "Queue(Engine) / Queue(AsyncEngine)"}


def asyncio_rows(results: dict) -> list[dict]:
    """The asyncio section's three targets: each async figure against its sync twin measured
    beside it (the median of the per-repetition ratios; for enqueue the worse of the two kinds
    of engine), and the sleep(0.1) drain's seconds."""
    a = results.get("asyncio") or {}
    enq = a.get("enqueue_many") or {}
    pairs = {label: enq[key] for key, label in ENQUEUE_ENGINES.items() if _median(enq.get(key) or {}, "ratio")}
    worst = min(pairs.items(), key=lambda kv: kv[1]["ratio"]["median"], default=None)
    worst_ratio = worst and worst[1]["ratio"]["median"]
    rows = [_row("enqueue_many_async(1,000) >= 80 % of enqueue_many(1,000) jobs/s, same run, same kind of engine",
                 worst_ratio, worst_ratio, lambda r: r >= 0.8, "{:.0%} (worst)",
                 note="; ".join(f"{label}: {_pair_note(_median(p, 'async'), _median(p, 'sync'))}"
                                for label, p in pairs.items()) or None, why=WHY_ASYNC_ENQUEUE)]
    d = (a.get("drain") or {}).get("1x10") or {}
    d_ratio = _median(d, "ratio")
    rows.append(_row("Async no-op drain, 1 process x concurrency 10 >= 80 % of the sync drain, same run",
                     d_ratio, d_ratio, lambda r: r >= 0.8, "{:.0%}",
                     note=_pair_note(_median(d.get("async") or {}, "jobs_per_s"),
                                     _median(d.get("sync") or {}, "jobs_per_s")), why=WHY_ASYNC_DRAIN))
    s = a.get("sleep") or {}
    seconds = _median(s, "seconds")
    jobs = s.get("jobs", 1000)
    note = None
    if s.get("incomplete"):
        note = f"only {s['completed']:,} of {jobs:,} completed"
    elif _median(s, "wall_seconds") is not None:
        note = f"the worker's run() returned after {_median(s, 'wall_seconds'):.2f} s"
    rows.append(_row(f"{jobs:,} jobs x `await asyncio.sleep(0.1)`, 1 process x concurrency 100, drained in <= 2 s",
                     seconds, ratio(seconds, 2.0), lambda r: r <= 1 and not s.get("incomplete"), "{:.2f} s",
                     note=note, why=WHY_ASYNC_SLEEP))
    return rows


# -- section 9, the peers (same run, same server, same clock) ---------------------------------------

PEER_FACTOR = 2.0  # the lead over pgqueuer asked of the CLI drains
STEADY_FACTOR = 1.3  # the lead over graphile-worker's best asked of the best CLI drain's steady rate


def best_cli_drain(peers: dict) -> tuple[str | None, dict]:
    """sqla_queue's best configuration among its CLI rows: the highest median from process start."""
    rows = (peers.get("drain") or {}).get("sqla_queue") or {}
    best = max(rows.items(), key=lambda kv: _median(kv[1], "jobs_per_s") or 0, default=(None, {}))
    return best


def peer_rows(results: dict) -> list[dict]:
    """The issue's side-by-side targets, each against the peer's figure from the same run:
    the CLI drains at 1 x 10 and 2 x 10 against pgqueuer's, sqla_queue's best CLI configuration
    against graphile-worker's best (from process start, and steady), bulk enqueue against
    graphile-worker's addJobs."""
    peers = results.get("peers") or {}
    drains = peers.get("drain") or {}
    ours, pgq, gw = drains.get("sqla_queue") or {}, drains.get("pgqueuer") or {}, drains.get("graphile-worker") or {}
    pgq_version = ((peers.get("versions") or {}).get("pgqueuer") or {}).get("pgqueuer", "")
    gw_version = ((peers.get("versions") or {}).get("graphile-worker") or {}).get("graphile-worker", "")
    rows = []
    for key in ("1x10", "2x10"):
        procs = key.split("x")[0]
        a, b = _median(ours.get(key) or {}, "jobs_per_s"), _median(pgq.get(key) or {}, "jobs_per_s")
        value = ratio(a, b)
        rows.append(_row(f"CLI drain, {procs} process{'es' if procs != '1' else ''} x 10, from process start "
                         f">= {PEER_FACTOR:g}x pgqueuer's, same run", value, value and value / PEER_FACTOR,
                         lambda r: r >= 1, "{:.2f}x",
                         note=_vs_note(a, b, f"pgqueuer {pgq_version}".strip()),
                         why=_why_vs_pgqueuer(results, key)))
    a, b = _median(ours.get("defaults") or {}, "jobs_per_s"), _median(pgq.get("defaults") or {}, "jobs_per_s")
    value = ratio(a, b)
    rows.append(_row(f"`sqla-queue worker` with no tuning flags, from process start >= {PEER_FACTOR:g}x `pgq run` "
                     "with none, same run", value, value and value / PEER_FACTOR, lambda r: r >= 1, "{:.2f}x",
                     note=_vs_note(a, b, f"pgqueuer {pgq_version}".strip()), why=WHY_DEFAULTS))
    best_key, best = best_cli_drain(peers)
    cores = ((results.get("meta") or {}).get("facts") or {}).get("cores")
    for field, label, factor in (("jobs_per_s", "from process start", 1.0), ("steady_per_s", "steady", STEADY_FACTOR)):
        a, b = _median(best, field), _median(gw.get("best") or {}, field)
        value = ratio(a, b)
        vs = _vs_note(a, b, f"graphile-worker {gw_version}".strip())
        rows.append(_row(f"Best sqla_queue CLI drain >= {factor:g}x graphile-worker's best batched config, {label}, "
                         "same run", value, value and value / factor, lambda r: r >= 1, "{:.2f}x",
                         note=vs and f"sqla_queue {best_key.replace('x', ' x ')}: {vs}",
                         why=_why_vs_graphile(peers, best, gw.get("best") or {}, field, factor, cores)
                         or WHY_VS_GRAPHILE_DRAIN))
    enq = peers.get("enqueue") or {}
    a = _median((enq.get("sqla_queue") or {}).get("bulk") or {}, "jobs_per_s")
    b = _median((enq.get("graphile-worker") or {}).get("bulk") or {}, "jobs_per_s")
    value = ratio(a, b)
    rows.append(_row("Bulk enqueue from a fresh process (calls of 1,000) >= graphile-worker's addJobs, same run",
                     value, value, lambda r: r >= 1, "{:.2f}x", note=_vs_note(a, b, "addJobs"),
                     why=WHY_VS_ADD_JOBS))
    rows.append(startup_row(peers))
    rows.append(startup_vs_pgqueuer_row(peers))
    rows.append(single_enqueue_row(peers))
    return rows


STARTUP_LIMIT_S = 0.3


def startup_row(peers: dict) -> dict:
    """The CLI worker's start-up (process start to first completion, 1 x 10) against 300 ms,
    with the import floor and pgqueuer's start-up from the same run for scale."""
    drains = peers.get("drain") or {}
    ours = _median((drains.get("sqla_queue") or {}).get("1x10") or {}, "startup_s")
    pgq = _median((drains.get("pgqueuer") or {}).get("1x10") or {}, "startup_s")
    floor = _median(peers, "import_floor_s")
    parts = [f"import floor (`python -c '{IMPORT_FLOOR}'`) {floor * 1000:,.0f} ms" if floor is not None else None,
             f"pgqueuer {pgq * 1000:,.0f} ms" if pgq is not None else None]
    raw = (((drains.get("raw") or {}).get(RAW_FOR["1x10"])) or {}).get("startup_s")
    return _row(f"CLI worker start-up (process start to first completion, 1 x 10) <= {STARTUP_LIMIT_S * 1000:.0f} ms",
                ours and ours * 1000, ratio(ours, STARTUP_LIMIT_S), lambda r: r <= 1, "{:,.0f} ms",
                note="; ".join(p for p in parts if p) or None,
                why=_raw_startup_text(ours, raw, STARTUP_LIMIT_S, "the target") or _why_startup(ours, floor))



def startup_vs_pgqueuer_row(peers: dict) -> dict:
    """The issue's start-up target: the CLI worker's start-up at 1 x 10 no later than pgqueuer's
    at 1 x 10 in the same run (a ratio above 1 means sqla_queue took longer)."""
    drains = peers.get("drain") or {}
    ours = _median((drains.get("sqla_queue") or {}).get("1x10") or {}, "startup_s")
    pgq = _median((drains.get("pgqueuer") or {}).get("1x10") or {}, "startup_s")
    floor = _median(peers, "import_floor_s")
    value = ratio(ours, pgq)
    note = (f"{ours * 1000:,.0f} vs pgqueuer {pgq * 1000:,.0f} ms" if ours is not None and pgq is not None else None)
    raw = (((drains.get("raw") or {}).get(RAW_FOR["1x10"])) or {}).get("startup_s")
    return _row("CLI worker start-up (process start to first completion, 1 x 10) <= pgqueuer's, same run",
                value, value, lambda r: r <= 1, "{:.2f}x", note=note,
                why=_why_startup_vs_pgqueuer(ours, pgq, floor, raw))


def single_enqueue_row(peers: dict) -> dict:
    """One job enqueued from a fresh process: the call (its first connection included) no slower
    than pgqueuer's in the same run (a ratio above 1 means sqla_queue took longer)."""
    enq = peers.get("enqueue") or {}
    ours = _median((enq.get("sqla_queue") or {}).get("single") or {}, "call_ms")
    pgq = _median((enq.get("pgqueuer") or {}).get("single") or {}, "call_ms")
    value = ratio(ours, pgq)
    note = f"{ours:.1f} vs pgqueuer {pgq:.1f} ms" if ours is not None and pgq is not None else None
    return _row("Single enqueue from a fresh process, the call <= pgqueuer's, same run", value, value,
                lambda r: r <= 1, "{:.2f}x", note=note, why=_why_single_vs_pgqueuer(enq))


def _why_single_vs_pgqueuer(enq: dict) -> str | None:
    """Each system's calls over the repetitions, and what sqla_queue's call does that pgqueuer's
    does not."""
    calls = {system: ((enq.get(system) or {}).get("single") or {}).get("call_ms") for system in ("sqla_queue", "pgqueuer")}
    if not all(c and c.get("median") is not None for c in calls.values()):
        return None
    spread = {system: f"{c['median']:.1f} ms ({c['min']:.1f}–{c['max']:.1f})" for system, c in calls.items()}
    return (f"The call took {spread['sqla_queue']} in sqla_queue and {spread['pgqueuer']} in pgqueuer over the "
            "repetitions. Within it sqla_queue builds the Queue (its engine and plugin manager), connects through "
            "SQLAlchemy, whose dialect sends its set-up queries before the first statement, takes the compiled INSERT "
            "from its statement cache (filled by the run's first sqla_queue process; docs/how-to/run-workers.md), "
            "and wakes the workers with a second statement once the INSERT has committed (section 10: concurrent "
            "enqueues then never wait on each other's commits); pgqueuer's call opens an asyncpg connection and "
            "sends one INSERT.")


def _vs_note(ours: float | None, theirs: float | None, who: str) -> str | None:
    if ours is None or theirs is None:
        return None
    return f"{ours:,.0f} vs {who} {theirs:,.0f} jobs/s"


def _median(mapping: dict, key: str) -> float | None:
    return (mapping.get(key) or {}).get("median")


def _pair_note(async_rate: float | None, sync_rate: float | None) -> str | None:
    if async_rate is None or sync_rate is None:
        return None
    return f"async {async_rate:,.0f}, sync {sync_rate:,.0f} jobs/s"


def _row(target, measured, ratio_value, passes, fmt, note=None, why=None) -> dict:
    """`why`: what the same run's figures say about a miss (shown under the table when missed)."""
    met = None if ratio_value is None else bool(passes(ratio_value))
    shown = "not measured" if measured is None else fmt.format(measured)
    return {"target": target, "measured": shown, "ratio": ratio_value, "met": met, "note": note, "why": why}


# -- why a target is missed: the run's own figures beside the reason ------------------------------
# Each returns None when the figures it needs were not measured; the report then says nothing.

def _why_floor(drain: dict | None, floor: int) -> str | None:
    """Against the raw limit the drain is judged by in the next target (paired with its own
    repetitions when it has them), so a run of the drain section alone can say why too."""
    if drain is None or drain["limit"] is None:
        return None
    raw = drain["limit"]
    return (f"A floor in jobs/s holds only on a machine like the one it was set on. Here the raw-SQL limit at "
            f"batch {drain['batch']} was {raw:,.0f} jobs/s ({drain['limit_label']}), so {floor:,} would be "
            f"{floor / raw:.0%} of it; the drain reached {drain['rate']:,.0f}, {ratio(drain['rate'], raw):.0%} of it "
            "(the next target's measure).")


def _why_raw_share(results: dict, worst: dict | None) -> str | None:
    if worst is None:
        return None
    d = (results.get("drain") or {}).get(worst["key"]) or {}
    cpu = _median(d, "client_cpu_us_per_job")
    cpu_text = f" The worker spent {cpu:,.0f} µs of CPU per job there." if cpu is not None else ""
    return ("The raw reference is a C client (pgbench) or a bare psycopg loop sending the same two statements. "
            "A worker's claim loop runs one round at a time: it waits for the round's answer, builds each job, "
            "hands it to a handler thread, and collects the finished ones for the next round, all in one Python "
            f"process whose threads share one interpreter lock.{cpu_text} On two cores that client CPU competes "
            "with PostgreSQL's, so the share of the raw limit falls as the batch grows and the server's part "
            "per job shrinks.")


def _why_enqueue_many(results: dict, many: float | None) -> str | None:
    per_r = (results.get("raw") or {}).get("enqueue", {})
    psycopg = (_get(per_r.get("psycopg") or {}, 1000) or {}).get("median")
    pgbench = (_get(per_r.get("pgbench") or {}, 1000) or {}).get("median")
    if many is None or psycopg is None:
        return None
    c_text = f"; pgbench, a C client, sent it at {pgbench:,.0f}" if pgbench is not None else ""
    share = ratio(many, psycopg)
    rest = ("what separates it from 60,000 here is turning 1,000 Python values into parameters, which any Python "
            "client pays." if share >= 0.9 else
            "the rest of the distance is sqla_queue's own work per job: validation, the enqueue hooks and the "
            "column arrays.")
    return (f"The same 1,000-row INSERT sent from Python by psycopg alone ran at {psycopg:,.0f} jobs/s in this run"
            f"{c_text}. `enqueue_many` reached {share:.0%} of the psycopg figure: {rest}")


def _why_single_enqueue(results: dict, single: float | None) -> str | None:
    per_r = (results.get("raw") or {}).get("enqueue", {})
    psycopg = (_get(per_r.get("psycopg") or {}, 1) or {}).get("median")
    if single is None or psycopg is None:
        return None
    return (f"The same INSERT sent from Python by psycopg alone ran at {psycopg:,.0f} jobs/s in this run, "
            f"{ratio(single, psycopg):.0%} of which sqla_queue's `enqueue` reached: most of the distance to pgbench "
            "is the Python client, which every Python queue pays; the rest is a pooled connection's checkout, "
            "the job's validation and the enqueue hooks.")


def _why_wakeup_latency(results: dict, key: str) -> str | None:
    peers = (results.get("peers") or {}).get("latency") or {}
    pgq = _median(peers.get("pgqueuer") or {}, key)
    gw = _median(peers.get("graphile-worker") or {}, key)
    peer_text = (f" In the same run the peers' idle wake-ups measured pgqueuer {pgq:.2f} ms and graphile-worker "
                 f"{gw:.2f} ms at the {key[:3]} (section 9)." if pgq is not None and gw is not None else "")
    return ("A wake-up here is the enqueuing transaction's commit, then the NOTIFY in a transaction of its own "
            "after it (section 10 says why), delivery to the worker's listener thread, a thread switch to the "
            "claim loop and its claim round trip: four steps through a two-core machine shared with the "
            f"server.{peer_text}")


def _why_wakeups(ratios: dict) -> str | None:
    if not ratios:
        return None
    text = ", ".join(f"{name}: {value:.0%}" for name, value in ratios.items())
    return (f"Per layout: {text}. A Queue coalesces its wake-ups to one per 10 ms within its process: the threads "
            "of one process share them, while 32 processes that each enqueue one job at a time send one for "
            "almost every job, a second small transaction per enqueue. In-transaction NOTIFY (section 10's "
            "caller's-transaction column) costs more than either.")


def _why_vs_pgqueuer(results: dict, key: str) -> str | None:
    """Steady rates against rates from process start: what the start-up takes out of the lead."""
    peers = results.get("peers") or {}
    drains = peers.get("drain") or {}
    ours, theirs = (drains.get("sqla_queue") or {}).get(key) or {}, (drains.get("pgqueuer") or {}).get(key) or {}
    figures = [_median(d, name) for d in (ours, theirs) for name in ("steady_per_s", "startup_s", "jobs_per_s")]
    floor = _median(peers, "import_floor_s")
    if None in figures or floor is None:
        return None
    steady, startup, rate, their_steady, their_startup, their_rate = figures
    whole = (peers.get("jobs") or 0) / rate
    return (f"Once started, sqla_queue's {key.replace('x', ' x ')} drained at {steady:,.0f} jobs/s, "
            f"{steady / their_steady:.1f}x pgqueuer's {their_steady:,.0f} (steady rates of the same repetitions). "
            f"From process start the lead is {rate / their_rate:.2f}x: sqla_queue's start-up took {startup:.2f} s "
            f"against pgqueuer's {their_startup:.2f} s (importing SQLAlchemy, psycopg and its dialect alone took "
            f"{floor:.2f} s in this run), {startup / whole:.0%} of its {whole:.2f} s for the "
            f"{peers.get('jobs', 0):,} jobs.{_raw_limit_text(peers, key, 'jobs_per_s', PEER_FACTOR * their_rate, rate)}")


def _raw_limit_text(peers: dict, key: str, field: str, needed: float, ours: float | None) -> str:
    """What the same run's raw limit (`benchmarks.peers.RAW`, the row bounding `key`) says of a
    target that asks `needed` of `field`: beyond any Python worker on this table here (even its
    best repetition fell short), within its reach (its median met it, and the gap is sqla_queue's
    own) or at the edge (between the two). Empty where the run has no raw limit."""
    raw_key = RAW_FOR.get(key, key)
    figures = (((peers.get("drain") or {}).get("raw") or {}).get(raw_key) or {}).get(field) or {}
    raw, best = figures.get("median"), figures.get("max")
    if raw is None:
        return ""
    what = "from process start" if field == "jobs_per_s" else "steady"
    processes = raw_key.split("x")[0]
    start = (f" The raw limit of a Python worker on this table (the import floor, psycopg and the reference "
             f"statements 500 jobs at a time, no handler; {processes} process{'es' if processes != '1' else ''}) "
             f"drained {raw:,.0f} jobs/s {what} in this run")
    if (best if best is not None else raw) < needed:
        return (f"{start} (its best repetition {best if best is not None else raw:,.0f}), short of the {needed:,.0f} "
                "the target asks: no Python worker on this table can meet it here.")
    if raw < needed:
        return (f"{start}, short of the {needed:,.0f} the target asks, though its best repetition reached "
                f"{best:,.0f}: at the edge of a Python worker's reach here.")
    share = f"; sqla_queue's reached {ours / raw:.0%} of it" if ours else ""
    return f"{start}, {raw / needed:.2f}x the {needed:,.0f} the target asks: within a Python worker's reach{share}."


WHY_DEFAULTS = (
    "The two defaults differ in kind: `sqla-queue worker` starts one process per core at concurrency 4 (its prefetch "
    "adapting to the handlers), `pgq run` one process that fetches 10 jobs at a time and starts a task for each; "
    "with no-op jobs the figure is mostly start-up (the supervisor and its worker processes each import the stack) "
    "and the rounds' commits.")
WHY_CLAIM_COST = (
    "Claimed and completed rows leave dead entries at the head of the pending index until VACUUM removes them; "
    "the worker's claims start from where the previous one got to, but this figure times claims from the head, "
    "so it grows with what autovacuum has not yet cleaned.")
WHY_PRIORITIES = (
    "The pending index orders by priority first, so with several priorities in use a claim from the head reads "
    "the highest priority's due jobs first and may pass the not-yet-due ones of each priority in turn.")
WHY_SUSTAINED = (
    "A long drain rewrites the table as fast as it empties it: dead tuples and index entries build up faster than "
    "autovacuum's default settings remove them; section 6 shows the windows, and the table options it compares.")
WHY_ASYNC_ENQUEUE = (
    "The asyncio face runs the same synchronous code through SQLAlchemy's `run_sync` in a greenlet, each "
    "statement awaiting the driver: a greenlet switch and an event loop turn per statement on top of the sync path.")
WHY_ASYNC_DRAIN = (
    "Async handlers run on the worker's own event loop, reached from the claim loop's thread once per batch, and "
    "their outcomes come back across threads; with no-op handlers that crossing is the whole of the work.")
WHY_ASYNC_SLEEP = (
    "The jobs are claimed at most `concurrency` at a time, each batch one round trip, and the worker's `run()` "
    "also waits for its threads to stop; section 8 gives both times.")
WHY_VS_GRAPHILE_DRAIN = (
    "graphile-worker's best configuration fetches up to 500 jobs ahead into a local queue and completes them in "
    "batches from a Node.js event loop, whose per-job cost is a fraction of a Python thread handoff; sqla_queue "
    "claims at most `--concurrency` jobs per round and runs each on a thread.")
WHY_VS_ADD_JOBS = (
    "graphile-worker's addJobs sends the batch as one JSON array to a SQL function that inserts it inside the "
    "server; sqla_queue validates each job and runs the enqueue hooks (dedupe keys, enqueued events) in Python, "
    "then sends one array per column.")


def _why_vs_graphile(peers: dict, ours: dict, theirs: dict, field: str, factor: float,
                     cores: int | None) -> str | None:
    """The CPU budget per job the target leaves on this machine against what the same run's
    drains spent: the workers' and PostgreSQL's CPU per job. From process start the budget
    is what is left of graphile-worker's time once the import floor has passed."""
    rate, jobs = _median(theirs, field), peers.get("jobs")
    client, server = _median(ours, "client_cpu_us_per_job"), _median(ours, "server_cpu_us_per_job")
    if not (rate and jobs and cores and client is not None and server is not None):
        return None
    if field == "steady_per_s":
        needed = factor * rate
        start = f"{factor:g}x graphile-worker's steady rate is {needed:,.0f} jobs/s"
    else:
        floor = _median(peers, "import_floor_s")
        left = jobs / (factor * rate) - (floor or 0.0)
        if left <= 0:
            return (f"graphile-worker drained {jobs:,} jobs from process start in {jobs / rate:.2f} s, less than "
                    f"importing SQLAlchemy, psycopg and its dialect takes here ({floor:.2f} s).")
        needed = jobs / left
        start = (f"To finish {jobs:,} jobs as soon as graphile-worker did, from process start, sqla_queue would "
                 f"have to run at {needed:,.0f} jobs/s once its imports are done ({floor or 0:.2f} s)")
    budget = cores * 1e6 / needed
    gw_client, gw_server = _median(theirs, "client_cpu_us_per_job"), _median(theirs, "server_cpu_us_per_job")
    gw_text = (f" (graphile-worker's: {gw_client:,.0f} and {gw_server:,.0f} µs)"
               if gw_client is not None and gw_server is not None else "")
    return (f"{start}. At that rate this machine's {cores} cores give the workers and PostgreSQL together "
            f"{budget:,.0f} µs of "
            f"CPU per job. sqla_queue's best drain spent {client:,.0f} µs per job in its worker processes (their "
            f"start-up included) and "
            f"{server:,.0f} µs in PostgreSQL{gw_text}: PostgreSQL's part alone is {server / budget:.0%} of that "
            "budget. sqla_queue keeps each finished job as history, so its completion writes a new row version and "
            "its index entries; graphile-worker deletes a finished job."
            + _raw_limit_text(peers, "best", field, factor * rate, _median(ours, field)))


def _why_startup_vs_pgqueuer(ours: float | None, pgq: float | None, floor: float | None,
                             raw: dict | None = None) -> str | None:
    if ours is None or pgq is None or floor is None:
        return None
    if raw is not None:
        return _raw_startup_text(ours, raw, pgq, "pgqueuer's")
    if floor >= pgq:
        return (f"Importing SQLAlchemy, psycopg and the psycopg dialect alone (`python -c '{IMPORT_FLOOR}'`) took "
                f"{floor * 1000:,.0f} ms in this run, longer than pgqueuer's whole start-up ({pgq * 1000:,.0f} ms; it "
                "imports asyncpg and no SQLAlchemy): no worker that connects through SQLAlchemy can start sooner here. "
                f"sqla_queue's own part on top of the floor was {(ours - floor) * 1000:,.0f} ms.")
    return (f"The floor (`python -c '{IMPORT_FLOOR}'`) was {floor * 1000:,.0f} ms and pgqueuer's start-up "
            f"{pgq * 1000:,.0f} ms; sqla_queue's own part on top of the floor was {(ours - floor) * 1000:,.0f} ms "
            "(its imports, the application's module, the first connection and claim).")


def _raw_startup_text(ours: float | None, raw: dict | None, limit: float, name: str) -> str | None:
    """The raw limit's first completion with one process (`raw`: its summary over the
    repetitions; the floor, a connection, one claim and completion) against the start-up a
    target allows (`limit` seconds, `name`): beyond reach only if even its best repetition was
    later."""
    median, best = (raw or {}).get("median"), (raw or {}).get("min")
    if ours is None or median is None:
        return None
    best = median if best is None else best
    if best > limit:
        reach = (f"later than {name} {limit * 1000:,.0f} ms even at its best ({best * 1000:,.0f} ms): no Python "
                 "worker on this table can start that soon here")
    elif median > limit:
        reach = (f"later than {name} {limit * 1000:,.0f} ms, though its best repetition took {best * 1000:,.0f} ms: "
                 "at the edge of a Python worker's reach here")
    else:
        reach = (f"{(limit - median) * 1000:,.0f} ms sooner than {name} {limit * 1000:,.0f} ms: within a Python "
                 "worker's reach")
    return (f"The raw limit with one process (a fresh interpreter importing SQLAlchemy, psycopg and the dialect, one "
            f"connection, the reference claim and completion of its first 10 jobs, no handler) first completed a job "
            f"{median * 1000:,.0f} ms after its start, {reach}. sqla_queue's own part on top of that was "
            f"{(ours - median) * 1000:,.0f} ms: its imports and the application's module, the worker's set-up (two "
            "engines, a connection, the queue limits read; its registration and LISTEN wait until its first rounds are "
            "done), its claim statement (from the statement cache the run's first worker "
            "filled), and a first batch run through its "
            "handler threads before the round that completes it.")


def _why_startup(ours: float | None, floor: float | None) -> str | None:
    if ours is None or floor is None:
        return None
    floor_text = f"Importing SQLAlchemy, psycopg and its dialect alone took {floor * 1000:,.0f} ms in this run"
    if ours < floor:  # two separate processes on a shared machine: the difference is noise
        return (f"{floor_text}, more than the target and more than the worker's whole start-up measured here "
                f"({ours * 1000:,.0f} ms, a different process minutes apart): no start-up that imports them "
                "can meet the target on this machine.")
    return (f"{floor_text}, more than the target; sqla_queue's own start-up on top of that was "
            f"{(ours - floor) * 1000:,.0f} ms (its imports, the application's module, the first connection and "
            "claim).")
