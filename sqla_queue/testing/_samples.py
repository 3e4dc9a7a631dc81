"""Inputs the conformance checks feed plugins: the awkward cases real queues produce."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import NonRetryableError
from ..types import (
    BatchCommitted,
    EmptyClaim,
    JobCancelled,
    JobClaimed,
    JobCompleted,
    JobEnqueued,
    JobFailed,
    JobRecovered,
    JobRetried,
    JobSnoozed,
    JobStatus,
    LostClaim,
)

_LONG = "t" * 128
_ODD = "émails-✉"


def sample_errors() -> list[BaseException]:
    """Exceptions handlers really raise, including ours and one with an empty message."""
    return [
        RuntimeError("boom"),
        ValueError(),
        TimeoutError("partner API timed out"),
        ConnectionError("reset by peer"),
        KeyError("missing"),
        NonRetryableError("do not retry"),
    ]


def sample_payloads() -> list[dict[str, Any]]:
    """Distinct payloads: empty, nested, unicode, numbers of both kinds, lists, nulls."""
    return [
        {},
        {"to": "a@example.com"},
        {"to": "b@example.com"},
        {"to": "a@example.com", "subject": "Receipt"},
        {"order": {"id": 42, "lines": [1, 2, 3], "meta": {"b": None, "a": True}}},
        {"order": {"id": 42, "lines": [3, 2, 1], "meta": {"b": None, "a": True}}},
        {"name": "Zoë", "emoji": "✉", "amount": 12.5},
        {"amount": 12.25},
        {"tags": [], "nested": {"deeper": {"deepest": [{"k": "v", "j": 1}]}}},
    ]


def reordered(value: Any) -> Any:
    """The same JSON value with every object's keys in reverse order, recursively."""
    if isinstance(value, dict):
        return {key: reordered(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(item) for item in value]
    return value


def edge_events(hook: str) -> list[Any]:
    """Events a metrics plugin must take without raising, for one lifecycle hook."""
    now = datetime.now(UTC)
    builders = {
        "sqla_queue_job_enqueued": lambda: [
            JobEnqueued(job_id=1, queue="default", task="send_email", deduplicated=False),
            JobEnqueued(job_id=1, queue=_ODD, task=_LONG, deduplicated=True),
            JobEnqueued(job_id=2, queue="default", task="send_email", deduplicated=False,
                        meta={"traceparent": "not a trace context", "tenant": {"id": 7}}),
            JobEnqueued(job_id=3, queue="default", task="send_email", deduplicated=False,
                        meta={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
        ],
        "sqla_queue_job_claimed": lambda: [
            JobClaimed(job_id=1, queue="default", task="t", attempt=1, worker_id="w", queue_wait=None),
            JobClaimed(job_id=2, queue=_ODD, task=_LONG, attempt=1000, worker_id="w",
                       queue_wait=timedelta(0)),
            JobClaimed(job_id=3, queue="q", task="t", attempt=1, worker_id="w",
                       queue_wait=timedelta(days=30)),
        ],
        "sqla_queue_job_completed": lambda: [
            JobCompleted(job_id=1, queue="default", task="t", attempt=1, duration=None),
            JobCompleted(job_id=2, queue=_ODD, task=_LONG, attempt=7, duration=timedelta(0)),
            JobCompleted(job_id=3, queue="q", task="t", attempt=1, duration=timedelta(hours=5)),
        ],
        "sqla_queue_job_retried": lambda: [
            JobRetried(job_id=1, queue="default", task="t", attempt=1, run_at=now, error=""),
            JobRetried(job_id=2, queue=_ODD, task=_LONG, attempt=99, run_at=now + timedelta(days=1),
                       error="x" * 300, exception=_raised(TimeoutError("x" * 300)), traceback="x" * 4000),
        ],
        "sqla_queue_job_failed": lambda: [
            JobFailed(job_id=1, queue="default", task="t", attempt=1, error=""),
            JobFailed(job_id=2, queue=_ODD, task=_LONG, attempt=1_000_000, error="ValueError: no",
                      exception=_raised(ValueError("no")), traceback="Traceback (most recent call last):"),
        ],
        "sqla_queue_job_snoozed": lambda: [
            JobSnoozed(job_id=1, queue="default", task="t", attempt=0, run_at=now, snoozes=1),
            JobSnoozed(job_id=2, queue=_ODD, task=_LONG, attempt=1_000_000, run_at=now + timedelta(days=365),
                       snoozes=2**31 - 1),
        ],
        "sqla_queue_job_cancelled": lambda: [
            JobCancelled(job_id=1, queue="default", task="t", attempt=0, requested_while_running=False),
            JobCancelled(job_id=2, queue=_ODD, task=_LONG, attempt=7, requested_while_running=True),
        ],
        "sqla_queue_job_recovered": lambda: [
            JobRecovered(job_id=1, queue="default", task="t", status=JobStatus.PENDING),
            JobRecovered(job_id=2, queue=_ODD, task=_LONG, status=JobStatus.FAILED),
            JobRecovered(job_id=3, queue="q", task="t", status=JobStatus.CANCELLED),
        ],
        "sqla_queue_lost_claim": lambda: [
            LostClaim(job_id=1, claim_token="token", reason="job no longer exists", operation="complete"),
            LostClaim(job_id=2, claim_token="token", reason="", operation="heartbeat"),
        ],
        "sqla_queue_empty_claim": lambda: [
            EmptyClaim(queue="default", worker_id="w", limit=1),
            EmptyClaim(queue=_ODD, worker_id="w", limit=1000),
        ],
        "sqla_queue_batch_committed": lambda: [
            BatchCommitted(operation="claim", worker_id="w", queues=("default",), claimed=(1,), completed=(),
                           started_at=now, duration=timedelta(0)),
            BatchCommitted(operation="complete", worker_id=None, queues=(_ODD, "q"), claimed=(),
                           completed=tuple(range(1, 1001)), started_at=now - timedelta(days=1),
                           duration=timedelta(hours=1)),
        ],
    }
    return builders[hook]()


def _raised(error: BaseException) -> BaseException:
    """`error` as a handler's failure arrives: raised, with a traceback."""
    try:
        raise error
    except BaseException as exc:
        return exc
