"""A job's place in its workflow as inline SVG, drawn on the server like the plots: the jobs it
depends on in a column on the left, the job in the middle, the jobs that depend on it on the
right, an arrow per edge, each job a box coloured by its state and linked to its page.

A batch callback can depend on thousands of jobs: each side shows its first `MAX_PER_SIDE` (by
id) and a box counting the rest. Every text it writes is escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from markupsafe import Markup, escape

MAX_PER_SIDE = 8
BOX_W, BOX_H, ROW, GAP, PAD = 190, 34, 44, 90, 8
"""A job's box, the distance between rows, the room for arrows between columns, the margin."""
TASK_CHARS = 22
"""A task name longer than this is cut (with an ellipsis) to fit its box; the full name is the
box's tooltip."""


def dependency_graph(job_id: int, task: str, status: str, graph: dict[str, Sequence[dict[str, Any]]],
                     link: Callable[[int], str]) -> Markup:
    """The SVG for job `job_id` and `graph` (`Queue.dependencies`' mapping); `link` gives a job's
    page. Empty when the job has neither dependencies nor dependents."""
    before, after = list(graph.get("depends_on", ())), list(graph.get("dependents", ()))
    if not before and not after:
        return Markup("")
    left, right = _column(before), _column(after)
    rows = max(len(left), len(right), 1)
    height = 2 * PAD + (rows - 1) * ROW + BOX_H
    xs = (PAD, PAD + BOX_W + GAP, PAD + 2 * (BOX_W + GAP))
    middle_y = (height - BOX_H) / 2
    parts = [_arrow_marker()]
    parts += [_edge(xs[0] + BOX_W, _y(i, len(left), height) + BOX_H / 2, xs[1], middle_y + BOX_H / 2, item)
              for i, item in enumerate(left)]
    parts += [_edge(xs[1] + BOX_W, middle_y + BOX_H / 2, xs[2], _y(i, len(right), height) + BOX_H / 2, item)
              for i, item in enumerate(right)]
    parts += [_box(xs[0], _y(i, len(left), height), item, link) for i, item in enumerate(left)]
    parts.append(_box(xs[1], middle_y, {"id": job_id, "task": task, "status": status}, link, current=True))
    parts += [_box(xs[2], _y(i, len(right), height), item, link) for i, item in enumerate(right)]
    width = xs[2] + BOX_W + PAD
    return Markup(
        f'<svg class="graph" role="img" viewBox="0 0 {width} {height:.0f}" width="{width}" height="{height:.0f}" '
        f'aria-label="job {job_id}: {len(before)} dependencies, {len(after)} dependents">'
        + "".join(parts) + "</svg>")


def _column(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The jobs of one side in id order, the ones beyond `MAX_PER_SIDE` counted in one box."""
    shown = sorted(jobs, key=lambda job: job["id"])[:MAX_PER_SIDE]
    hidden = len(jobs) - len(shown)
    return shown + ([{"more": hidden}] if hidden else [])


def _y(index: int, count: int, height: float) -> float:
    """A column's boxes centred on the graph's height."""
    top = (height - ((count - 1) * ROW + BOX_H)) / 2
    return top + index * ROW


def _arrow_marker() -> str:
    return ('<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="8" markerHeight="8" '
            'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" class="arrowhead"/></marker></defs>')


def _edge(x1: float, y1: float, x2: float, y2: float, item: dict[str, Any]) -> str:
    """A curve from one box to the next, dashed when the dependent runs anyway (its dependency
    may fail without cancelling it)."""
    bend = (x2 - x1) / 2
    kind = "edge edge-anyway" if item.get("run_anyway") else "edge"
    return (f'<path class="{kind}" d="M{x1:.1f},{y1:.1f} C{x1 + bend:.1f},{y1:.1f} {x2 - bend:.1f},{y2:.1f} '
            f'{x2:.1f},{y2:.1f}" marker-end="url(#arrow)"/>')


def _box(x: float, y: float, item: dict[str, Any], link: Callable[[int], str], *, current: bool = False) -> str:
    if "more" in item:
        return (f'<g class="node node-more"><rect x="{x:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
                f'<text x="{x + 10:.1f}" y="{y + 21:.1f}">+{item["more"]:,} more</text></g>')
    status = str(item.get("status") or "pruned")
    task = str(item.get("task") or "(pruned)")
    shown = task if len(task) <= TASK_CHARS else task[:TASK_CHARS - 1] + "…"
    classes = f"node status-{escape(status)}" + (" node-current" if current else "")
    return (f'<a href="{escape(link(int(item["id"])))}"><g class="{classes}">'
            f'<title>{escape(task)} · {escape(status)}</title>'
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
            f'<text x="{x + 10:.1f}" y="{y + 21:.1f}"><tspan class="job-id">#{int(item["id"])}</tspan> '
            f'{escape(shown)}</text></g></a>')
