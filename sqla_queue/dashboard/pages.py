"""The read-only pages: overview, jobs, one job, workers, doctor, and the sign-in challenge.

Each page reads through the Queue's public methods, the same index-served statements the CLI's
``stats`` and ``jobs list`` use: nothing here scans the job table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from .. import _validate
from ..errors import InvalidInputError
from ..ops.doctor import Doctor, Verdict
from ..types import JobStatus
from . import history
from .graph import dependency_graph
from .plots import latest, line_chart, with_colors
from .rendering import url

if TYPE_CHECKING:
    from .rendering import Dashboard

PAGE_SIZE = 50
WORKER_STATUS_CLASS = {"running": "verdict-ok", "stopping": "verdict-warn", "dead": "verdict-fail"}
ACTIVE = (JobStatus.PENDING, JobStatus.RUNNING)


def routes(dashboard: Dashboard) -> list[Route]:
    pages = Pages(dashboard)
    return [
        Route("/", pages.overview, name="overview"),
        Route("/jobs", pages.jobs, name="jobs"),
        Route("/jobs/{job_id:int}", pages.job, name="job"),
        Route("/workers", pages.workers, name="workers"),
        Route("/doctor", pages.doctor, name="doctor"),
        Route("/signin", pages.signin, name="signin"),
    ]


@dataclass(frozen=True)
class JobFilter:
    """The jobs page's filters, read from its query string; `problem` says what was wrong."""

    status: str = ""
    queue: str = ""
    task: str = ""
    created_after: str = ""
    created_before: str = ""
    before_id: int | None = None
    problem: str = ""

    @classmethod
    def from_query(cls, query: Any) -> JobFilter:
        values = {name: query.get(name, "").strip()
                  for name in ("status", "queue", "task", "created_after", "created_before")}
        before = query.get("before_id", "").strip()
        if before and not _validate.is_whole_number_text(before):
            return cls(**values, problem=f"before_id must be a job id, got {before!r}")
        return cls(**values, before_id=int(before) if before else None)

    def list_jobs_arguments(self) -> dict[str, Any]:
        """`Queue.list_jobs` keywords; `InvalidInputError` names a time that does not parse."""
        return {
            "status": self.status or None, "queue": self.queue or None, "task": self.task or None,
            "before_id": self.before_id, "limit": PAGE_SIZE,
            "created_after": parse_time(self.created_after, "created after"),
            "created_before": parse_time(self.created_before, "created before"),
        }

    def query(self, **changes: Any) -> dict[str, Any]:
        values = {"status": self.status, "queue": self.queue, "task": self.task,
                  "created_after": self.created_after, "created_before": self.created_before,
                  "before_id": self.before_id}
        return {**values, **changes}

    @property
    def has_time(self) -> bool:
        return bool(self.created_after or self.created_before)


def parse_time(text: str, what: str) -> datetime | None:
    """A filter time as the page's datetime-local input sends it (``2026-01-31T14:05``), in UTC."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(f"{what}: {text!r} is not a date and time like 2026-01-31T14:05") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


class Pages:
    def __init__(self, dashboard: Dashboard) -> None:
        self.d = dashboard
        self.queue = dashboard.queue

    async def overview(self, request: Request) -> Response:
        range_name = request.query_params.get("range", "1h")
        if range_name not in history.RANGES:
            range_name = "1h"
        selected = request.query_params.get("queue") or None
        await self.d.call(self.d.sample_now)
        try:
            stats, points = await self.d.call_together(
                self.queue.stats, partial(self.queue.history, since=history.RANGES[range_name], queue_name=selected))
        except InvalidInputError as exc:  # a queue name no queue could have
            return await self.d.render(request, "problem.html", status_code=400, problem=str(exc), nav="overview")
        charts = []
        for chart in history.charts(points, range_name=range_name, now=stats.measured_at, queue=selected):
            chart = with_colors(chart)
            charts.append({"svg": line_chart(chart), "chart": chart,
                           "legend": [(s, latest(s)) for s in chart.series]})
        queues = [*stats.queues.values(), *stats.idle.values()]
        return await self.d.render(request, "overview.html", stats=stats, queues=queues, charts=charts,
                                   range_name=range_name, ranges=list(history.RANGES), selected=selected,
                                   totals=totals(stats.queues.values()), live=True, nav="overview")

    async def jobs(self, request: Request) -> Response:
        filters = JobFilter.from_query(request.query_params)
        page, problem = None, filters.problem
        if not problem:
            try:
                page = await self.d.call(self.queue.list_jobs, **filters.list_jobs_arguments())
            except InvalidInputError as exc:
                problem = str(exc)
        queues = await self.d.call(self.queue.list_queues)
        nav = "failed" if filters.status == JobStatus.FAILED.value else "jobs"
        return await self.d.render(request, "jobs.html", status_code=400 if problem else 200, filters=filters,
                                   page=page, problem=problem, statuses=[s.value for s in JobStatus],
                                   queue_names=[q.name for q in queues], nav=nav)

    async def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        try:
            job = await self.d.call(self.queue.get_job, job_id)
        except InvalidInputError:  # not a job id at all (zero, beyond bigint)
            job = None
        if job is None:
            return await self.d.render(request, "missing.html", status_code=404, job_id=job_id, nav="jobs")
        linked = await self.d.call(self.queue.dependencies, job.id)
        graph = dependency_graph(job.id, job.task, job.status.value, linked,
                                 lambda other: url(request, "job", job_id=other))
        return await self.d.render(request, "job.html", job=job, live=job.status in ACTIVE, nav="jobs",
                                   now=datetime.now(timezone.utc), graph=graph, linked=linked)

    async def workers(self, request: Request) -> Response:
        """The worker registry: live workers first (idle ones too), dead ones marked."""
        registered = await self.d.call(self.queue.workers)
        live_count = sum(1 for w in registered if w.alive)
        return await self.d.render(request, "workers.html", workers=registered, live_count=live_count,
                                   dead_count=len(registered) - live_count, status_class=WORKER_STATUS_CLASS,
                                   now=datetime.now(timezone.utc), live=True, nav="workers")

    async def doctor(self, request: Request) -> Response:
        report = await self.d.call(Doctor(self.queue).run)
        return await self.d.render(request, "doctor.html", report=report, worst=report.worst(),
                                   Verdict=Verdict, nav="doctor")

    async def signin(self, request: Request) -> Response:
        """Answer 401 with a basic-auth challenge until the browser's credentials are accepted."""
        if self.d.auth is not None and getattr(self.d.auth, "challenges", False) and \
                not await self.d.allowed(request):
            return Response("sign-in required to act on jobs", status_code=401,
                            headers={"WWW-Authenticate": 'Basic realm="sqla_queue dashboard"'})
        return RedirectResponse(url(request, "overview"), status_code=303)


def totals(healths: Any) -> dict[str, int]:
    """Sums over every queue with jobs, for the overview's headline figures."""
    names = ("pending", "eligible", "scheduled", "running", "completed", "failed")
    result = dict.fromkeys(names, 0)
    for health in healths:
        for name in names:
            result[name] += getattr(health, name)
    return result
