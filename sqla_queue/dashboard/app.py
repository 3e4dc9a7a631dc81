"""The dashboard's ASGI application: `create_app` wires the pages (`pages.py`), the actions
(`actions.py`) and the vendored static files into one Starlette app, mountable at any path."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from . import actions, pages
from .rendering import HERE, Dashboard
from .security import Auth, Signer

if TYPE_CHECKING:
    from ..queue import Queue


def create_app(queue: Queue, *, auth: Auth | None = None, title: str = "sqla_queue",
               secret_key: str | bytes | None = None, refresh: float = 10.0,
               record_samples: bool = True) -> Starlette:
    """The dashboard for `queue` as an ASGI app.

    :param auth: ``auth(request) -> bool`` (or an async one): True lets that request retry,
        cancel, pause and resume. Without it the dashboard is read-only. See `basic_auth`.
    :param title: shown in the navigation bar and the window title.
    :param secret_key: signs the CSRF tokens and flash messages; give one when several
        processes serve the dashboard behind one address (default: random per process).
    :param refresh: seconds between the live pages' refreshes (overview, workers, an active job).
    :param record_samples: let the overview record the current minute's sample
        (`Queue.record_sample`) at most every 30 s, so history exists while no worker runs.
    """
    if refresh <= 0:
        raise ValueError(f"refresh must be positive, got {refresh!r}")
    dashboard = Dashboard(queue=queue, auth=auth, title=title, signer=Signer(secret_key), refresh=refresh,
                          record_samples=record_samples)
    routes = [*pages.routes(dashboard), *actions.routes(dashboard),
              Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static")]
    return Starlette(routes=routes)

