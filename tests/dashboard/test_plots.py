"""The SVG plots and the history folded into them: no database, no browser."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqla_queue.dashboard import history
from sqla_queue.dashboard.plots import Chart, Series, line_chart, nice_ticks, path_data, time_ticks
from sqla_queue.types import HistoryPoint

T0 = datetime(2026, 3, 1, 14, 0, tzinfo=timezone.utc)


def minute(n: int) -> datetime:
    return T0 + timedelta(minutes=n)


def test_y_ticks_are_round_and_reach_the_top():
    assert nice_ticks(7) == [0, 2, 4, 6, 8]
    assert nice_ticks(100) == [0, 25, 50, 75, 100]
    assert nice_ticks(0.3) == [0, 0.1, 0.2, 0.3]
    assert nice_ticks(0) == [0, 1]


def test_time_ticks_fall_on_the_clock_at_a_step_that_suits_the_range():
    hour = time_ticks(minute(3), minute(63))
    assert [t.strftime("%H:%M") for t in hour] == ["14:10", "14:20", "14:30", "14:40", "14:50", "15:00"]
    day = time_ticks(minute(0), minute(24 * 60))
    assert all(t.minute == 0 and t.hour % 4 == 0 for t in day) and len(day) <= 7


def test_a_missing_sample_lifts_the_pen():
    assert path_data([(0, 1), (1, 2), (2, None), (3, 4), (4, 5)]) == "M0.0,1.0 L1.0,2.0 M3.0,4.0 L4.0,5.0"


def test_chart_has_axes_labels_lines_and_escaped_text():
    chart = Chart("Backlog <of> jobs", minute(0), minute(60),
                  (Series("pending & <friends>", [(minute(n), float(n)) for n in range(60)]),))
    svg = str(line_chart(chart))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<title>Backlog &lt;of&gt; jobs</title>" in svg
    assert "pending &amp; &lt;friends&gt;" in svg and "<friends>" not in svg
    assert svg.count('<path class="line"') == 1
    assert ">14:30<" in svg and ">60<" in svg  # a time tick, the top y tick


def test_an_empty_chart_says_there_is_nothing_yet():
    svg = str(line_chart(Chart("Failures", minute(0), minute(60), (Series("failed", [(minute(0), None)]),))))
    assert "no samples in this range yet" in svg and "<path" not in svg


def test_a_lone_sample_is_drawn_as_a_dot():
    svg = str(line_chart(Chart("x", minute(0), minute(60), (Series("s", [(minute(5), 3.0), (minute(6), None)]),))))
    assert "<circle" in svg


def point(n: int, queue: str = "default", **values) -> HistoryPoint:
    return HistoryPoint(at=minute(n), queue=queue, **values)


def test_queues_add_up_and_durations_take_the_slowest_queue():
    points = [point(1, pending=3, completed=2, duration_p95=timedelta(seconds=1)),
              point(1, "images", pending=4, completed=5, duration_p95=timedelta(seconds=3))]
    combined = history.combine(points)[minute(1)].values
    assert combined["pending"] == 7 and combined["completed"] == 7 and combined["duration_p95"] == 3.0
    assert history.combine(points, "images")[minute(1)].values["pending"] == 4


def test_an_hour_is_minute_by_minute_with_gaps_where_nobody_sampled():
    points = [point(n, completed=n) for n in (50, 51, 53)]
    charts = history.charts(points, range_name="1h", now=minute(53))
    throughput = charts[1].series[0].points
    assert len(throughput) == 60 and throughput[0][0] == minute(-6)
    assert [v for _, v in throughput[-4:]] == [50, 51, None, 53]


def test_a_day_folds_five_minutes_into_one_point():
    points = [point(n, completed=10, pending=n) for n in range(5)]
    charts = history.charts(points, range_name="24h", now=minute(4))
    backlog, throughput = charts[0].series[0].points, charts[1].series[0].points
    assert len(throughput) == 24 * 12
    assert throughput[-1] == (minute(0), 10.0) and backlog[-1] == (minute(0), 4.0)  # the mean, the highest
