"""The speed targets, judged against one run's results."""

from __future__ import annotations

from .peers import IMPORT_FLOOR
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
                         d and d["rate"], d and ratio(d["rate"], floor), lambda r: r >= 1, "{:,.0f} jobs/s"))
    worst = min((d for d in drains.values() if d["ratio"] is not None), key=lambda d: d["ratio"], default=None)
    same = [d["same_connections_ratio"] for d in drains.values() if d["same_connections_ratio"] is not None]
    rows.append(_row(
        "Drain at any batch size >= 60 % of the raw-SQL limit at that batch size",
        worst and worst["ratio"], worst and worst["ratio"], lambda r: r >= 0.6, "{:.0%} (worst)",
        note=worst and (f"worst: {worst['processes']} proc x conc {worst['concurrency']} at batch {worst['batch']}"
                        + (f"; against raw with as many connections as worker processes, worst {min(same):.0%}"
                           if same else ""))))
    enqueued = results.get("enqueue") or {}
    many = enqueued.get("many_1000", {}).get("median")
    rows.append(_row("enqueue_many(1,000) >= 60,000 jobs/s", many, ratio(many, 60_000), lambda r: r >= 1,
                     "{:,.0f} jobs/s"))
    single = enqueued.get("single", {}).get("median")
    raw_single, label = raw_enqueue_limit(results, 1)
    slower = ratio(raw_single, single)
    rows.append(_row("Single enqueue within 1.5x of the raw single-row INSERT", slower, slower,
                     lambda r: r <= 1.5, "{:.2f}x slower", note=f"raw: {label}" if label else None))
    lat = results.get("latency") or {}
    for key, limit in (("p50_ms", 3.0), ("p99_ms", 10.0)):
        value = lat.get(key, {}).get("median")
        rows.append(_row(f"Idle wake-up latency {key[:3]} <= {limit:g} ms", value, ratio(value, limit),
                         lambda r: r <= 1, "{:.2f} ms"))
    cost = results.get("claim_cost")
    growth = cost and ratio(cost["large"]["ours_us"]["median"], cost["small"]["ours_us"]["median"])
    backlogs = (f"{cost['large']['backlog']:,} pending within 1.3x of {cost['small']['backlog']:,}" if cost
                else "a large backlog within 1.3x of a small one")
    rows.append(_row(f"Claim cost at {backlogs}", growth, growth, lambda r: r <= 1.3, "{:.2f}x"))
    rows.append(priorities_row(results))
    default = (results.get("sustained") or {}).get("default", {})
    keep = default.get("last_over_first", {}).get("median")
    rows.append(_row("Sustained drain: last window >= 80 % of the first (default table)", keep, keep,
                     lambda r: r >= 0.8, "{:.0%}",
                     note="run stopped at the time cap" if default.get("capped") else None))
    return rows + asyncio_rows(results) + [wakeups_row(results)] + peer_rows(results)


def wakeups_row(results: dict) -> dict:
    """Enqueue throughput with wake-ups on against off, 32 enqueuers at once: the worse layout."""
    layouts = ((results.get("wakeups") or {}).get("layouts") or {}).items()
    ratios = {name: ratio(v["on"]["median"], v["off"]["median"]) for name, v in layouts}
    ratios = {name: r for name, r in ratios.items() if r is not None}
    worst = min(ratios.items(), key=lambda kv: kv[1], default=None)
    return _row("Enqueue with wake-ups on >= 90 % of wake-ups off, 32 concurrent single-job enqueuers",
                worst and worst[1], worst and worst[1] / 0.9, lambda r: r >= 1, "{:.0%} (worst)",
                note=worst and f"worst layout: {worst[0]}")


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
    return _row(PRIORITIES_TARGET, value, value, lambda r: r <= 1.2, "{:.2f}x", note=note or None)


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
                                for label, p in pairs.items()) or None)]
    d = (a.get("drain") or {}).get("1x10") or {}
    d_ratio = _median(d, "ratio")
    rows.append(_row("Async no-op drain, 1 process x concurrency 10 >= 80 % of the sync drain, same run",
                     d_ratio, d_ratio, lambda r: r >= 0.8, "{:.0%}",
                     note=_pair_note(_median(d.get("async") or {}, "jobs_per_s"),
                                     _median(d.get("sync") or {}, "jobs_per_s"))))
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
                     note=note))
    return rows


# -- section 9, the peers (same run, same server, same clock) ---------------------------------------

PEER_FACTOR = 2.0  # the lead over pgqueuer asked of the CLI drains


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
                         note=_vs_note(a, b, f"pgqueuer {pgq_version}".strip())))
    best_key, best = best_cli_drain(peers)
    for field, label in (("jobs_per_s", "from process start"), ("steady_per_s", "steady")):
        a, b = _median(best, field), _median(gw.get("best") or {}, field)
        value = ratio(a, b)
        vs = _vs_note(a, b, f"graphile-worker {gw_version}".strip())
        rows.append(_row(f"Best sqla_queue CLI drain >= graphile-worker's best batched config, {label}, same run",
                         value, value, lambda r: r >= 1, "{:.2f}x",
                         note=vs and f"sqla_queue {best_key.replace('x', ' x ')}: {vs}"))
    enq = peers.get("enqueue") or {}
    a = _median((enq.get("sqla_queue") or {}).get("bulk") or {}, "jobs_per_s")
    b = _median((enq.get("graphile-worker") or {}).get("bulk") or {}, "jobs_per_s")
    value = ratio(a, b)
    rows.append(_row("Bulk enqueue from a fresh process (calls of 1,000) >= graphile-worker's addJobs, same run",
                     value, value, lambda r: r >= 1, "{:.2f}x", note=_vs_note(a, b, "addJobs")))
    rows.append(startup_row(peers))
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
    return _row(f"CLI worker start-up (process start to first completion, 1 x 10) <= {STARTUP_LIMIT_S * 1000:.0f} ms",
                ours and ours * 1000, ratio(ours, STARTUP_LIMIT_S), lambda r: r <= 1, "{:,.0f} ms",
                note="; ".join(p for p in parts if p) or None)



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


def _row(target, measured, ratio_value, passes, fmt, note=None) -> dict:
    met = None if ratio_value is None else bool(passes(ratio_value))
    shown = "not measured" if measured is None else fmt.format(measured)
    return {"target": target, "measured": shown, "ratio": ratio_value, "met": met, "note": note}
