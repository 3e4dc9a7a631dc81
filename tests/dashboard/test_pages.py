"""The pages over HTTP (Starlette's TestClient, the app in-process) on real PostgreSQL: what each
shows, that user-controlled text is escaped, the jobs filters and keyset pages."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from sqla_queue.dashboard import create_app
from sqla_queue.services.registry import WorkerDescription, WorkerRegistration


@pytest.fixture
def client(dash_queue) -> TestClient:
    """A read-only dashboard: pages only."""
    return TestClient(create_app(dash_queue))


def test_overview_shows_every_queue_with_its_backlog_and_pause(client, dash_queue):
    for n in range(3):
        dash_queue.enqueue("send_email", {"to": f"{n}@example.com"})
    dash_queue.enqueue("resize", {"image": 1})
    dash_queue.enqueue("send_email", {"to": "later"}, delay=timedelta(hours=1))
    dash_queue.pause("images")
    page = client.get("/")
    assert page.status_code == 200
    rows = table_rows(page.text, "queues")
    assert rows["default"][:4] == ["4", "3", "1", "0"]  # pending, eligible, scheduled, running
    assert rows["images"][:4] == ["1", "1", "0", "0"]
    assert 'class="badge paused">paused' in row_html(page.text, "images")
    assert page.text.count("<svg") == 5  # backlog, throughput, failures, durations, empty claims


def test_overview_shows_a_queues_limits_and_its_throttled_claims(client, dash_queue):
    dash_queue.enqueue_many([{"task": "send_email", "payload": {}, "group_key": "k"}] * 2)
    dash_queue.set_limits("default", group_concurrency=1)
    assert len(dash_queue.claim("default", worker_id="w", limit=5)) == 1  # the other job held back
    page = client.get("/")
    assert 'class="badge limited" title="limits">group concurrency 1' in row_html(page.text, "default")
    assert int(table_rows(page.text, "queues")["default"][-1]) >= 1  # throttled (counters outlive jobs)


def test_overview_plots_what_the_samples_recorded(client, dash_queue, failed_job):
    dash_queue.enqueue("send_email", {"to": "x"})
    failed_job()
    assert dash_queue.record_sample() >= 1
    page = client.get("/?range=1h")
    backlog = figure(page.text, 1)
    assert "Backlog" in backlog and '<path class="line"' in backlog
    assert "no samples in this range yet" not in backlog
    assert "pending <b>1</b>" in " ".join(backlog.split())
    assert "last 24h" in page.text and client.get("/?range=24h&queue=default").status_code == 200


def test_jobs_filter_by_status_queue_and_task(client, dash_queue, failed_job):
    dash_queue.enqueue("send_email", {"to": "a"})
    dash_queue.enqueue("resize", {"image": 2})
    failed = failed_job()
    assert job_ids(client.get("/jobs?status=failed").text) == [failed.id]
    assert job_ids(client.get("/jobs?queue=images").text) == [2]
    assert job_ids(client.get("/jobs?task=send_email").text) == [failed.id, 1]
    assert job_ids(client.get("/jobs?task=send_email&status=pending").text) == [1]


def test_jobs_filter_by_creation_time(client, dash_queue):
    dash_queue.enqueue("send_email", {"to": "a"})
    now = datetime.now(timezone.utc)
    minute = "%Y-%m-%dT%H:%M"
    assert job_ids(client.get("/jobs", params={"created_after": (now - timedelta(hours=1)).strftime(minute)}).text) == [1]
    assert job_ids(client.get("/jobs", params={"created_after": (now + timedelta(hours=1)).strftime(minute)}).text) == []
    assert job_ids(client.get("/jobs", params={"created_before": (now - timedelta(hours=1)).strftime(minute)}).text) == []


def test_a_bad_filter_is_named_and_lists_nothing(client, dash_queue):
    dash_queue.enqueue("send_email", {"to": "a"})
    page = client.get("/jobs", params={"created_after": "yesterday-ish"})
    assert page.status_code == 400
    assert "created after: &#39;yesterday-ish&#39; is not a date and time" in page.text
    assert client.get("/jobs?before_id=abc").status_code == 400
    assert client.get("/jobs?before_id=²").status_code == 400  # D11: a digit int() refuses
    assert "unknown status" in client.get("/jobs?status=lost").text


def test_jobs_are_paged_by_keyset_newest_first(client, dash_queue):
    dash_queue.enqueue_many([{"task": "send_email", "payload": {"to": str(n)}} for n in range(60)])
    first = client.get("/jobs")
    assert job_ids(first.text) == list(range(60, 10, -1))
    older = link(first.text, 'id="older"')
    assert "before_id=11" in older
    second = client.get(older)
    assert job_ids(second.text) == list(range(10, 0, -1))
    assert 'id="older"' not in second.text and "last page" in second.text


def test_job_detail_escapes_payload_error_and_traceback(client, dash_queue):
    job_id = dash_queue.enqueue("explode", {"html": "<script>alert('payload')</script>"})
    dash_queue.worker(concurrency=1).run(until_empty=True)
    page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "&lt;script&gt;alert(" in page.text
    assert "<b>mailer</b>" not in page.text and "the &lt;b&gt;mailer&lt;/b&gt; refused" in page.text
    assert 'class="traceback"' in page.text and "in explode" in page.text
    assert 'class="badge status-failed">failed' in page.text


def test_job_detail_bounds_a_large_payload_and_shows_the_result(client, dash_queue):
    job_id = dash_queue.enqueue("send_email", {"to": "big@example.com", "blob": "x" * 100_000})
    dash_queue.worker(concurrency=1).run(until_empty=True)
    page = client.get(f"/jobs/{job_id}")
    assert "bytes in all" in page.text and len(page.text) < 20_000
    assert "&#34;sent_to&#34;: &#34;big@example.com&#34;" in page.text  # the handler's result


def test_a_missing_job_is_a_404_page(client):
    page = client.get("/jobs/424242")
    assert page.status_code == 404 and "No job 424242" in page.text


def register(queue, worker_id: str, queues: list[str]) -> None:
    """A worker's row in the registry, as the worker writes it (alive for a minute)."""
    assert WorkerRegistration(queue.core, WorkerDescription.of_this_process(
        worker_id, queues, queue.task_names, 4, timedelta(minutes=1))).register()


def test_workers_page_shows_the_registry_idle_busy_and_dead(client, dash_queue, dash_engine):
    job_id = dash_queue.enqueue("send_email", {"to": "a"})
    register(dash_queue, "host-7:99:aa", ["default", "images"])
    register(dash_queue, "host-8:12:bb", ["images"])  # idle: never claimed anything
    register(dash_queue, "host-9:5:cc", ["default"])
    dash_queue.claim("default", worker_id="host-7:99:aa", limit=1)
    with dash_engine.begin() as conn:  # host-9 stopped beating a minute ago
        conn.execute(text("UPDATE sqla_queue_jobs_workers SET expires_at = now() - interval '1 minute' "
                          "WHERE id = 'host-9:5:cc'"))
    page = client.get("/workers")
    assert page.status_code == 200
    rows = table_rows(page.text, "workers")
    assert list(rows) == ["host-7:99:aa", "host-8:12:bb", "host-9:5:cc"]  # live first
    # cells after the id: status, host, pid, version, queues, running now, concurrency, last seen, started
    assert rows["host-7:99:aa"][0] == "running" and rows["host-7:99:aa"][5] == str(job_id)
    assert rows["host-7:99:aa"][4] == "default images"
    assert rows["host-8:12:bb"][0] == "running" and rows["host-8:12:bb"][5] == "idle"
    assert rows["host-9:5:cc"][0] == "dead" and 'verdict-fail">dead' in row_html(page.text, "host-9:5:cc")
    assert ">2 live<" in page.text and ">1 dead<" in page.text


def test_workers_page_says_when_no_worker_is_registered(client):
    assert "No worker is registered" in client.get("/workers").text


def test_doctor_page_is_red_naming_a_queue_no_live_worker_serves(client, dash_queue):
    for n in range(5):
        dash_queue.enqueue("resize", {"image": n})
    page = client.get("/doctor")
    assert '<span class="badge verdict-fail">FAIL</span>' in page.text
    section = next(part for part in page.text.split("<section") if "unserved queues" in part)
    assert "check-fail" in section and "no live worker serves: images" in section


def test_doctor_hints_render_backticked_commands_as_code(client, dash_queue):
    dash_queue.enqueue("explode", {})
    dash_queue.worker(concurrency=1).run(until_empty=True)
    section = next(part for part in client.get("/doctor").text.split("<section") if "recent failures" in part)
    hint = section[section.index('class="hint"'):]
    assert "<code>sqla-queue jobs list --status failed</code>" in hint
    assert "`" not in hint


def test_code_spans_escape_the_rest_and_leave_an_unpaired_backtick():
    from sqla_queue.dashboard.formatting import code_spans

    assert code_spans("run `a<b>` & go") == "run <code>a&lt;b&gt;</code> &amp; go"
    assert code_spans("it's `odd") == "it&#39;s `odd"


def test_doctor_page_shows_each_check_with_its_verdict(client):
    page = client.get("/doctor")
    assert page.status_code == 200
    for name in ("claim plan", "vacuum horizon", "stuck jobs"):
        assert name in page.text.replace("_", " ")
    assert "verdict-" in page.text


def test_mounted_under_a_prefix_every_link_keeps_it(dash_queue):
    host = Starlette(routes=[Mount("/ops/queue", app=create_app(dash_queue))])
    client = TestClient(host)
    page = client.get("/ops/queue/")
    assert page.status_code == 200
    assert 'href="/ops/queue/static/dashboard.css"' in page.text
    assert 'href="/ops/queue/jobs"' in page.text
    assert client.get("/ops/queue/static/htmx.min.js").status_code == 200
    assert client.get("/ops/queue/static/dashboard.css").headers["content-type"].startswith("text/css")


def test_nothing_is_loaded_from_another_site(client):
    page = client.get("/")
    assert "http://" not in page.text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page.text


# -- reading the pages --------------------------------------------------------------------


def between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def table_rows(html: str, table_id: str) -> dict[str, list[str]]:
    """A table's rows by their first cell's text: the other cells' texts."""
    import re

    body = between(html, f'id="{table_id}"', "</tbody>")
    rows = {}
    for row in body.split("<tr>")[2:]:
        cells = [re.sub(r"<[^>]+>", " ", cell) for cell in row.split("<td")[1:]]
        cells = [" ".join(c.split(">", 1)[1].split()) for c in cells]
        rows[cells[0].split()[0]] = cells[1:]
    return rows


def row_html(html: str, first_cell: str) -> str:
    return next(row for row in html.split("<tr>") if f">{first_cell}<" in row)


def job_ids(html: str) -> list[int]:
    import re

    if 'id="jobs"' not in html:
        return []
    return [int(n) for n in re.findall(r'<td class="num"><a href="/jobs/(\d+)">', html)]


def link(html: str, marker: str) -> str:
    tag = next(t for t in html.split("<a ") if marker in t)
    return between(tag, 'href="', '"').replace("&amp;", "&")


def figure(html: str, n: int) -> str:
    return between(html, f'data-chart="{n}"', "</figure>")


def test_bad_input_in_a_url_is_a_clear_4xx_not_an_error(client):
    assert client.get("/jobs/0").status_code == 404
    assert client.get(f"/jobs/{2**70}").status_code == 404
    page = client.get("/", params={"queue": "x" * 10_000})
    assert page.status_code == 400 and "queue" in page.text


def test_job_detail_draws_the_jobs_workflow_and_links_each_job(client, dash_queue):
    charge = dash_queue.enqueue("send_email", {"step": "charge"})
    email = dash_queue.enqueue("send_email", {"step": "email"}, depends_on=[charge])
    archive = dash_queue.enqueue("resize", {"step": "archive"}, depends_on=[email], on_dependency_failure="run")

    page = client.get(f"/jobs/{email}")
    panel = page.text[page.text.index('id="dependencies"'):]
    graph = panel[panel.index('<svg class="graph"'):panel.index("</svg>")]
    assert "1 dependencies · 1 dependents" in panel
    assert f'href="/jobs/{charge}"' in graph and f'href="/jobs/{archive}"' in graph
    assert 'class="node status-pending"' in graph  # charge
    assert 'class="node status-waiting node-current"' in graph and 'class="node status-waiting"' in graph
    assert graph.count('class="edge"') == 1 and graph.count('class="edge edge-anyway"') == 1
    assert 'id="dependencies"' not in client.get(f"/jobs/{dash_queue.enqueue('send_email', {})}").text


def test_job_detail_counts_the_dependencies_it_does_not_draw(client, dash_queue):
    parts = dash_queue.enqueue_many([{"task": "send_email", "payload": {"n": n}} for n in range(11)])
    callback = dash_queue.enqueue("resize", {}, depends_on=parts)
    graph = client.get(f"/jobs/{callback}").text
    drawn = [job_id for job_id in parts if f'href="/jobs/{job_id}"' in graph]
    assert drawn == parts[:8] and "+3 more" in graph and "11 dependencies · 0 dependents" in graph
