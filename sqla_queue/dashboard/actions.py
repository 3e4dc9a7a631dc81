"""The actions: retry and cancel (one job, the selected jobs, or every job a filter matches),
pause and resume a queue. Each is a POST that passes `auth` and the CSRF check, calls the same
Queue method the CLI calls, and redirects with a report of what it changed.

The log line of an action names the job ids, queue and task, never a payload value.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from .. import _validate
from ..errors import InvalidInputError, JobStateError
from ..reports import BulkResult
from ..types import JobStatus
from .rendering import url
from .security import CSRF_COOKIE, CSRF_FIELD, csrf_valid

if TYPE_CHECKING:
    from .rendering import Dashboard

log = logging.getLogger("sqla_queue.dashboard")
BULK_LIMIT = 1000
"""The most jobs one bulk action changes; the report says how many it left."""
MAX_FORM_BYTES = 64 * 1024

Form = dict[str, list[str]]


def routes(dashboard: Dashboard) -> list[Route]:
    act = Actions(dashboard)
    return [
        Route("/jobs/{job_id:int}/retry", act.guarded(act.retry), methods=["POST"], name="retry"),
        Route("/jobs/{job_id:int}/cancel", act.guarded(act.cancel), methods=["POST"], name="cancel"),
        Route("/jobs/bulk", act.guarded(act.bulk), methods=["POST"], name="bulk"),
        Route("/queues/pause", act.guarded(act.pause), methods=["POST"], name="pause"),
        Route("/queues/resume", act.guarded(act.resume), methods=["POST"], name="resume"),
    ]


async def read_form(request: Request) -> Form:
    """The urlencoded body (the dashboard's forms send nothing else), bounded in size."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise InvalidInputError("the form is too large")
    return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


def first(form: Form, name: str) -> str:
    return (form.get(name) or [""])[0].strip()


def back_to(request: Request, form: Form, default: str) -> str:
    """Where to go after the action: the form's own page when it is a path on this site."""
    target = first(form, "next")
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else default


def bulk_report(result: BulkResult, verb: str) -> str:
    ids = ", ".join(str(i) for i in result.changed[:20]) + (", …" if result.count > 20 else "")
    changed = f"{verb} {result.count} job{'s' if result.count != 1 else ''}" + (f" ({ids})" if ids else "")
    return changed + (f"; {result.skipped} left alone (busy or over the limit)" if result.skipped else "")


class Actions:
    def __init__(self, dashboard: Dashboard) -> None:
        self.d = dashboard
        self.queue = dashboard.queue

    def guarded(self, action: Callable[[Request, Form], Awaitable[Response]]):
        """`action`, reached only by an allowed request whose form carries a valid CSRF token;
        a refused state or bad input comes back as an error report on the page it came from."""

        async def endpoint(request: Request) -> Response:
            if not await self.d.allowed(request):
                return PlainTextResponse("this dashboard is read-only for you: its auth did not allow actions",
                                         status_code=403)
            try:
                form = await read_form(request)
            except InvalidInputError as exc:
                return PlainTextResponse(str(exc), status_code=400)
            if not csrf_valid(self.d.signer, request.cookies.get(CSRF_COOKIE), first(form, CSRF_FIELD)):
                return PlainTextResponse("missing or stale CSRF token: reload the page and try again",
                                         status_code=403)
            try:
                return await action(request, form)
            except (InvalidInputError, JobStateError) as exc:
                return self.d.redirect(request, back_to(request, form, url(request, "overview")), str(exc), "error")

        return endpoint

    async def retry(self, request: Request, form: Form) -> Response:
        job = await self.d.call(self.queue.retry_now, request.path_params["job_id"])
        log.info("dashboard retried job %s (%s on %s)", job.id, job.task, job.queue)
        return self.d.redirect(request, back_to(request, form, url(request, "job", job_id=job.id)),
                               f"job {job.id} ({job.task} on {job.queue}) is pending again, due now: "
                               f"attempt {job.attempts + 1} of {job.max_attempts}")

    async def cancel(self, request: Request, form: Form) -> Response:
        job = await self.d.call(self.queue.cancel, request.path_params["job_id"])
        log.info("dashboard cancelled job %s (%s on %s): now %s", job.id, job.task, job.queue, job.status)
        message = (f"cancel requested for running job {job.id} ({job.task} on {job.queue}, held by "
                   f"{job.locked_by}): it ends cancelled when its handler returns"
                   if job.status is JobStatus.RUNNING else f"cancelled job {job.id} ({job.task} on {job.queue})")
        return self.d.redirect(request, back_to(request, form, url(request, "job", job_id=job.id)), message)

    async def bulk(self, request: Request, form: Form) -> Response:
        """Retry or cancel the ticked ids, or (``retry_filter``, ``cancel_filter``) every job the
        page's queue and task filter matches."""
        action, _, scope = first(form, "action").partition("_")
        if action not in ("retry", "cancel") or scope not in ("", "filter"):
            raise InvalidInputError(f"unknown bulk action {first(form, 'action')!r}")
        selection = bulk_selection(form, whole_filter=scope == "filter")
        if action == "retry":
            result = await self.d.call(self.queue.retry_jobs, **selection, limit=BULK_LIMIT)
        else:
            status = first(form, "status") or None
            result = await self.d.call(self.queue.cancel_jobs, status=status, **selection, limit=BULK_LIMIT)
        log.info("dashboard bulk %s: %d changed, %d skipped", action, result.count, result.skipped)
        verb = "retried" if action == "retry" else "cancelled (or asked to stop)"
        return self.d.redirect(request, back_to(request, form, url(request, "jobs")), bulk_report(result, verb))

    async def pause(self, request: Request, form: Form) -> Response:
        state = await self.d.call(self.queue.pause, first(form, "queue"))
        log.info("dashboard paused queue %s", state.name)
        return self.d.redirect(request, back_to(request, form, url(request, "overview")),
                               f"queue {state.name} is paused: workers claim nothing from it until resumed "
                               f"({state.pending} pending, {state.running} running)")

    async def resume(self, request: Request, form: Form) -> Response:
        state = await self.d.call(self.queue.resume, first(form, "queue"))
        log.info("dashboard resumed queue %s", state.name)
        return self.d.redirect(request, back_to(request, form, url(request, "overview")),
                               f"queue {state.name} is resumed ({state.pending} pending)")


def bulk_selection(form: Form, *, whole_filter: bool) -> dict:
    """The jobs a bulk action targets: the ticked ids, or the whole filter's queue and task
    (the status is the action's own: retry takes failed jobs)."""
    if whole_filter:
        return {"queue_name": first(form, "queue") or None, "task": first(form, "task") or None, "job_ids": None}
    raw = form.get("job_id", [])
    if not raw:
        raise InvalidInputError("no job selected: tick the jobs to act on, or act on the whole filter")
    if not all(_validate.is_whole_number_text(value) for value in raw):
        raise InvalidInputError("job ids must be whole numbers")
    return {"queue_name": None, "task": None, "job_ids": [int(value) for value in raw]}
