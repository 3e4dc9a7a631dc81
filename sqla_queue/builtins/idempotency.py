"""Default dedupe key: none. Only an explicit ``idempotency_key=`` deduplicates.

A content-derived key would silently collapse jobs users meant to repeat; that is an opt-in
plugin, not a default.
"""

from __future__ import annotations

from ..hookspecs import hookimpl


@hookimpl(trylast=True)
def sqla_queue_idempotency_key() -> None:
    return None
