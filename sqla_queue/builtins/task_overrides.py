"""Per-task strategies: ``@queue.task(retry_delay=..., idempotency_key=...)`` as a plugin.

A task's own option is the most specific thing a user can say, so it is asked first
(``tryfirst``), before explicit and entry-point plugins. It is an ordinary plugin registered
under ``sqla_queue.task_overrides``: it shows up in ``sqla-queue plugins``, and blocking that
name turns every per-task option off. Unlike the module-level defaults it is one object per
Queue, because it reads that Queue's task registry.

A task without the option answers ``None`` and the plugins decide as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import PluginError
from ..hookspecs import hookimpl
from ..types import ClaimedJob

if TYPE_CHECKING:
    from .._tasks import TaskRegistry

TASK_OVERRIDES_NAME = "sqla_queue.task_overrides"


class TaskOverrides:
    def __init__(self, tasks: TaskRegistry) -> None:
        self._tasks = tasks

    def serves(self, tasks: TaskRegistry) -> bool:
        """True when these are the per-task options of `tasks` (one Queue's registry)."""
        return self._tasks is tasks

    @hookimpl(tryfirst=True)
    def sqla_queue_retry_delay(self, job: ClaimedJob, error: BaseException, attempt: int) -> Any:
        task = self._tasks.get(job.task)
        if task is None or task.retry_delay is None:
            return None
        rule = task.retry_delay
        answer = rule if isinstance(rule, timedelta) else rule(attempt, error)
        if answer is None or answer is False:
            return answer
        if not isinstance(answer, timedelta) or answer < timedelta(0):
            raise PluginError(
                f"retry_delay of task {job.task!r} returned {type(answer).__name__} "
                f"{answer!r:.60}; expected a non-negative timedelta, False or None"
            )
        return answer

    @hookimpl(tryfirst=True)
    def sqla_queue_idempotency_key(self, task: str, payload: Mapping[str, Any]) -> str | None:
        registered = self._tasks.get(task)
        if registered is None or registered.idempotency_key is None:
            return None
        key = registered.idempotency_key(payload)
        if key is not None and not (isinstance(key, str) and key):
            raise PluginError(
                f"idempotency_key of task {task!r} returned {type(key).__name__}; "
                "expected a non-empty str or None"
            )
        return key
