"""A web dashboard for a `Queue`: ``create_app(queue, auth=...)`` is an ASGI app (Starlette) to
serve with ``sqla-queue dashboard`` or mount inside a host application; see
docs/how-to/dashboard.md. Needs the ``dashboard`` extra: ``pip install 'sqla-queue[dashboard]'``.
"""

from __future__ import annotations

from .app import create_app
from .security import Auth, basic_auth

__all__ = ["Auth", "basic_auth", "create_app"]
