"""What every page and action shares: the `Dashboard` (queue, auth, signer, templates) and
the paths of its routes under whatever mount point the host chose.

Every request runs the Queue's synchronous methods in Starlette's thread pool, so a slow query
never blocks the event loop of the host application the dashboard is mounted in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import anyio
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from . import formatting
from .security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    FLASH_COOKIE,
    Auth,
    Signer,
    allowed,
    decode_flash,
    encode_flash,
    new_nonce,
)

if TYPE_CHECKING:
    from ..queue import Queue

HERE = Path(__file__).parent
SAMPLE_EVERY = 30.0
"""Seconds between the overview's own `record_sample` calls (workers record one a minute too)."""
log = logging.getLogger("sqla_queue.dashboard")


@dataclass
class Dashboard:
    """One mounted dashboard: its queue, who may act, and how its pages are rendered."""

    queue: Queue
    auth: Auth | None
    title: str
    signer: Signer
    refresh: float
    record_samples: bool
    templates: Environment = field(init=False)
    _sampled_at: float = field(default=0.0, init=False)
    _sample_lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.templates = Environment(loader=FileSystemLoader(HERE / "templates"),
                                     autoescape=select_autoescape(default=True), trim_blocks=True,
                                     lstrip_blocks=True)
        self.templates.filters.update(
            timestamp=formatting.timestamp, duration=formatting.duration, compact=formatting.compact,
            payload=formatting.payload_text, payload_size=formatting.payload_size,
            code_spans=formatting.code_spans,
        )
        self.templates.globals.update(age=formatting.age, per_minute=formatting.per_minute,
                                      percent=formatting.percent)

    async def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A Queue method, in the thread pool."""
        return await run_in_threadpool(method, *args, **kwargs)

    async def call_together(self, *calls: Callable[[], Any]) -> list[Any]:
        """Several Queue calls at once, each on its own pooled connection: a page waits for the
        slowest, not for their sum. The first exception raised is raised here."""
        results: list[Any] = [None] * len(calls)
        errors: list[BaseException] = []

        async def run(index: int, call: Callable[[], Any]) -> None:
            try:
                results[index] = await run_in_threadpool(call)
            except Exception as exc:  # raised as itself below, not inside an exception group
                errors.append(exc)

        async with anyio.create_task_group() as group:
            for index, call in enumerate(calls):
                group.start_soon(run, index, call)
        if errors:
            raise errors[0]
        return results

    def sample_now(self) -> None:
        """Record this minute's sample at most every `SAMPLE_EVERY` seconds, so a dashboard
        shows history even while no worker runs; a refusal (a read-only role) is only logged."""
        if not self.record_samples:
            return
        with self._sample_lock:
            if time.monotonic() - self._sampled_at < SAMPLE_EVERY:
                return
            self._sampled_at = time.monotonic()
        try:
            self.queue.record_sample()
        except Exception as exc:  # the page still renders from what workers recorded
            log.warning("dashboard could not record a sample: %s", type(exc).__name__)

    async def allowed(self, request: Request) -> bool:
        return await allowed(self.auth, request)

    async def render(self, request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
        """A page: the template with the request's flash, CSRF token and permissions."""
        nonce = request.cookies.get(CSRF_COOKIE) or new_nonce()
        flash = decode_flash(self.signer, request.cookies.get(FLASH_COOKIE))
        html = self.templates.get_template(template).render(
            request=request, title=self.title, flash=flash, can_act=await self.allowed(request),
            challenges=getattr(self.auth, "challenges", False), csrf_field=CSRF_FIELD,
            csrf_token=self.signer.signed(nonce), refresh=self.refresh, url=lambda name, **p: url(request, name, **p),
            here=current_url(request), **context,
        )
        response = HTMLResponse(html, status_code=status_code)
        if request.cookies.get(CSRF_COOKIE) != nonce:
            response.set_cookie(CSRF_COOKIE, nonce, httponly=True, samesite="strict", path=cookie_path(request))
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE, path=cookie_path(request))
        return response

    def redirect(self, request: Request, to: str, message: str, kind: str = "ok") -> Response:
        """303 to `to` with the action's report in a signed flash cookie."""
        response = RedirectResponse(to, status_code=303)
        response.set_cookie(FLASH_COOKIE, encode_flash(self.signer, message, kind), httponly=True,
                            samesite="strict", path=cookie_path(request), max_age=60)
        return response


def url(request: Request, name: str, query: dict[str, Any] | None = None, **path_params: Any) -> str:
    """The path of route `name` under the dashboard's mount point, with `query` (empty values
    dropped)."""
    path = request.scope.get("root_path", "") + str(request.app.url_path_for(name, **path_params))
    kept = {k: v for k, v in (query or {}).items() if v not in (None, "")}
    return f"{path}?{urlencode(kept)}" if kept else path


def current_url(request: Request) -> str:
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


def cookie_path(request: Request) -> str:
    return request.scope.get("root_path", "") or "/"
