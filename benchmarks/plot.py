"""docs/performance.png: four panels from the same results dict as the report."""

from __future__ import annotations

from pathlib import Path

from . import targets


def draw(results: dict, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    _throughput(axes[0][0], results)
    _sustained(axes[0][1], results)
    _enqueue(axes[1][0], results)
    _latency(axes[1][1], results)
    meta = results["meta"]
    fig.suptitle(f"sqla_queue vs the raw-SQL limit — size {meta['size']}, {meta['facts']['cores']} cores, "
                 f"PostgreSQL {meta['facts']['settings'].get('server_version', '?')}, {meta['started']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _throughput(ax, results: dict) -> None:
    import matplotlib

    for method, per_c in results["raw"]["claim"].items():
        for clients, per_b in per_c.items():
            points = sorted((int(b), s["median"]) for b, s in per_b.items() if s["median"])
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", linestyle="--",
                    label=f"raw {method}, {clients} client(s)")
    colours = matplotlib.colormaps["Dark2"].colors
    for i, row in enumerate(r for r in targets.drain_ratios(results) if r["batch"]):
        if row["batch"]:
            ax.scatter([row["batch"]], [row["rate"]], s=70, zorder=3, marker="s", edgecolors="black",
                       color=colours[i % len(colours)],
                       label=f"sqla_queue {row['processes']} proc x {row['concurrency']}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("jobs per claim (batch size)")
    ax.set_ylabel("jobs/s (claim + complete)")
    ax.set_title("Drain vs raw-SQL limit by batch size")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)


def _sustained(ax, results: dict) -> None:
    cfg = results["sustained"]["_config"]
    for name, v in results["sustained"].items():
        if name.startswith("_") or not v["windows"]:
            continue
        xs = [(i + 1) * cfg["window_s"] for i in range(len(v["windows"]))]
        ax.plot(xs, v["windows"], marker=".", label=name)
    ax.set_xlabel("seconds (end of window)")
    ax.set_ylabel("jobs/s in window")
    ax.set_title(f"Sustained drain, {cfg['processes']} proc x {cfg['concurrency']}, {cfg['jobs']:,}-job backlog")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)


def _enqueue(ax, results: dict) -> None:
    labels, ours, raw = [], [], []
    for key, rows, label in (("single", 1, "1 per txn"), ("many_100", 100, "100 per call"),
                             ("many_1000", 1000, "1,000 per call")):
        labels.append(label)
        ours.append(results["enqueue"].get(key, {}).get("median") or 0)
        raw.append(targets.raw_enqueue_limit(results, rows)[0] or 0)
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], raw, width=0.4, label="raw INSERT (best method)")
    ax.bar([x + 0.2 for x in xs], ours, width=0.4, label="sqla_queue enqueue / enqueue_many")
    ax.set_xticks(list(xs), labels)
    ax.set_yscale("log")
    ax.set_ylabel("jobs/s")
    ax.set_title("Enqueue")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)


def _latency(ax, results: dict) -> None:
    samples = sorted(results["latency"].get("samples_ms") or [])
    if samples:
        ys = [(i + 1) / len(samples) for i in range(len(samples))]
        ax.plot(samples, ys)
        for pct, limit in ((0.5, 3), (0.99, 20)):
            ax.axvline(limit, linestyle=":", color="grey")
            ax.text(limit, pct, f" target p{int(pct * 100)} ≤ {limit} ms", fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("ms from enqueue commit to handler start")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Idle wake-up latency (all repetitions)")
    ax.grid(True, which="both", alpha=0.3)
