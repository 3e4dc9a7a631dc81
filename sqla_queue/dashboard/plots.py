"""Time-series plots as inline SVG, drawn on the server: no JavaScript plotting library, nothing
fetched from a CDN, and a page that shows its plots even with scripts off.

`line_chart` draws one or more `Series` of ``(time, value)`` points over a fixed time range:
a y axis with round ticks and grid lines, an x axis with clock ticks (UTC) at a step that suits
the range, a legend with each series' latest value, and a gap wherever a series has no point
(a minute no worker sampled). Every text it writes is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from markupsafe import Markup, escape

WIDTH, HEIGHT = 560, 200
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 12, 26
"""The plot area's margins inside the SVG: room for y labels on the left, time labels below."""

PALETTE = ("#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2")

# Clock-tick steps, shortest first: the first that gives at most `MAX_X_TICKS` ticks is used.
_TIME_STEPS = tuple(timedelta(minutes=m) for m in (1, 2, 5, 10, 15, 30, 60, 120, 180, 240, 360, 720, 1440))
MAX_X_TICKS = 7


@dataclass(frozen=True)
class Series:
    """One line: its legend label, its points in time order (None values are gaps), its colour."""

    label: str
    points: Sequence[tuple[datetime, float | None]]
    color: str = ""


@dataclass(frozen=True)
class Chart:
    """What `line_chart` draws: the series over ``[start, end]``; `format_value` writes the y
    labels and the legend's latest values (a count by default)."""

    title: str
    start: datetime
    end: datetime
    series: Sequence[Series] = field(default_factory=tuple)
    format_value: Callable[[float], str] = lambda v: f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"
    empty_text: str = "no samples in this range yet"


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """Round y ticks from 0 to at least `top`: steps of 1, 2 or 5 times a power of ten."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks_needed = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(ticks_needed + 1)]


def time_ticks(start: datetime, end: datetime) -> list[datetime]:
    """Clock-aligned times inside ``[start, end]``, at the shortest step giving few enough ticks."""
    span = end - start
    step = next((s for s in _TIME_STEPS if span / s <= MAX_X_TICKS), _TIME_STEPS[-1])
    epoch = datetime(2000, 1, 1, tzinfo=timezone.utc)
    first = epoch + math.ceil((start - epoch) / step) * step
    ticks = []
    while first <= end:
        ticks.append(first)
        first += step
    return ticks


def time_label(at: datetime, span: timedelta) -> str:
    at = at.astimezone(timezone.utc)
    if span > timedelta(days=1) or (at.hour == 0 and at.minute == 0 and span >= timedelta(hours=12)):
        return at.strftime("%b %d %H:%M")
    return at.strftime("%H:%M")


def line_chart(chart: Chart) -> Markup:
    """The chart as an ``<svg>`` element, sized by its viewBox so CSS can make it fluid."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    series = with_colors(chart).series
    values = [v for s in series for _, v in s.points if v is not None]
    y_ticks = nice_ticks(max(values, default=0.0))
    y_top = y_ticks[-1] or 1.0
    span = chart.end - chart.start

    def x(at: datetime) -> float:
        return LEFT + plot_w * ((at - chart.start) / span if span else 0.0)

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / y_top)

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{escape(chart.title)}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(chart.title)}</title>"]
    for tick in y_ticks:
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>')
        parts.append(f'<text class="ylabel" x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
                     f"{escape(chart.format_value(tick))}</text>")
    for tick in time_ticks(chart.start, chart.end):
        parts.append(f'<line class="tick" x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{TOP + plot_h}" '
                     f'y2="{TOP + plot_h + 4}"/>')
        parts.append(f'<text class="xlabel" x="{x(tick):.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
                     f"{escape(time_label(tick, span))}</text>")
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}"/>')
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}"/>')
    for s in series:
        d = path_data([(x(at), None if v is None else y(v)) for at, v in s.points])
        if d:
            parts.append(f'<path class="line" d="{d}" stroke="{escape(s.color)}">'
                         f"<title>{escape(s.label)}</title></path>")
        parts.extend(_lone_points(s, x, y))
    if not values:
        parts.append(f'<text class="empty" x="{LEFT + plot_w / 2:.1f}" y="{TOP + plot_h / 2:.1f}" '
                     f'text-anchor="middle">{escape(chart.empty_text)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def with_colors(chart: Chart) -> Chart:
    """The chart with a palette colour for each series that has none (the legend uses them too)."""
    series = tuple(s if s.color else Series(s.label, s.points, PALETTE[i % len(PALETTE)])
                   for i, s in enumerate(chart.series))
    return replace(chart, series=series)


def path_data(points: Sequence[tuple[float, float | None]]) -> str:
    """An SVG path through the points, lifting the pen at every None (a gap in the samples)."""
    commands, pen_down = [], False
    for px, py in points:
        if py is None:
            pen_down = False
            continue
        commands.append(f"{'L' if pen_down else 'M'}{px:.1f},{py:.1f}")
        pen_down = True
    return " ".join(commands)


def _lone_points(s: Series, x: Callable[[datetime], float], y: Callable[[float], float]) -> list[str]:
    """A dot for each point with no neighbour: a path of one point draws nothing."""
    dots, points = [], list(s.points)
    for i, (at, v) in enumerate(points):
        before = points[i - 1][1] if i > 0 else None
        after = points[i + 1][1] if i + 1 < len(points) else None
        if v is not None and before is None and after is None:
            dots.append(f'<circle cx="{x(at):.1f}" cy="{y(v):.1f}" r="2.5" fill="{escape(s.color)}"/>')
    return dots


def latest(s: Series) -> float | None:
    """The series' last value that is not a gap, for the legend."""
    return next((v for _, v in reversed(s.points) if v is not None), None)
