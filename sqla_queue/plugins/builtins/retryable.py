"""Default retry classification: every exception is worth another attempt, except ours that
say otherwise."""

from __future__ import annotations

from ...errors import NonRetryableError, UnknownTaskError
from ...hookspecs import hookimpl


@hookimpl(trylast=True)
def sqla_queue_is_retryable(error: BaseException) -> bool:
    return not isinstance(error, (NonRetryableError, UnknownTaskError))
