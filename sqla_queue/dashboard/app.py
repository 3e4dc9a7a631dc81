"""The dashboard's ASGI application: `create_app` wires the pages (`pages.py`), the actions
(`actions.py`) and the vendored static files into one Starlette app, mountable at any path."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from . import actions, pages
from .rendering import HERE, Dashboard
from .security import Auth, Guard, Signer

if TYPE_CHECKING:
    from ..queue import Queue


def create_app(queue: Queue, *, auth: Auth | None = None, title: str = "sqla_queue",
               secret_key: str | bytes | None = None, refresh: float = 10.0,
               record_samples: bool = True, read_auth: Auth | None = None,
               allowed_hosts: Iterable[str] | None = None) -> Starlette:
    """The dashboard for `queue` as an ASGI app.

    :param auth: ``auth(request) -> bool`` (or an async one): True lets that request retry,
        cancel, pause and resume. Without it the dashboard is read-only. See `basic_auth`.
    :param title: shown in the navigation bar and the window title.
    :param secret_key: signs the CSRF tokens and flash messages; give one when several
        processes serve the dashboard behind one address (default: random per process).
    :param refresh: seconds between the live pages' refreshes (overview, workers, an active job).
    :param record_samples: let the overview record the current minute's sample
        (`Queue.record_sample`) at most every 30 s, so history exists while no worker runs.
    :param read_auth: ``read_auth(request) -> bool``: when given, every page needs it (pages
        show payloads and errors); `basic_auth` fits here too. Default: pages are open.
    :param allowed_hosts: the ``Host`` header values served (without ports); any other is
        refused, against DNS rebinding. Default None: not checked (a host application mounting
        the dashboard checks hosts itself); ``sqla-queue dashboard`` passes its bound host and
        the loopback names.

    Every response carries security headers: no framing, no MIME sniffing, no referrer, no
    caching.
    """
    if refresh <= 0:
        raise ValueError(f"refresh must be positive, got {refresh!r}")
    dashboard = Dashboard(queue=queue, auth=auth, title=title, signer=Signer(secret_key), refresh=refresh,
                          record_samples=record_samples)
    routes = [*pages.routes(dashboard), *actions.routes(dashboard),
              Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static")]
    hosts = None if allowed_hosts is None else tuple(allowed_hosts)
    return Starlette(routes=routes, middleware=[Middleware(Guard, allowed_hosts=hosts, read_auth=read_auth)])

