"""How a job names the jobs it depends on (`Queue.enqueue`'s ``depends_on=``), checked.

Kept apart from `types` (at its length limit); `sqla_queue.Earlier` is public.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import _validate
from ._batches import BatchStatus, WorkflowReads, batch_status  # noqa: F401  (re-exported)
from .errors import InvalidInputError

ON_DEPENDENCY_FAILURE = ("cancel", "run")
"""What a job does when a job it depends on fails for good or is cancelled: be cancelled too
(the default), or run anyway once every dependency has finished."""


@dataclass(frozen=True)
class Earlier:
    """In ``enqueue_many``'s ``depends_on``: the job of item `index` of the same call, which
    must come before the item that names it (so a call's jobs never form a cycle)::

        a, b, c = queue.enqueue_many([
            {"task": "charge", "payload": {}},
            {"task": "email", "payload": {}, "depends_on": [sq.Earlier(0)]},
            {"task": "archive", "payload": {}, "depends_on": [sq.Earlier(0), sq.Earlier(1)]},
        ])
    """

    index: int


Reference = int | Earlier
"""A job's dependency as given: an existing job's id, or an earlier item of the same call."""


def depends_on(value: Any, position: int | None) -> tuple[Reference, ...]:
    """`value` (an iterable of job ids and `Earlier`) checked, duplicates dropped; `position`
    is the item's index in ``enqueue_many`` (None for a single ``enqueue``, which has no
    earlier items). Raises `InvalidInputError` naming the bad entry."""
    if isinstance(value, (str, bytes, Earlier)) or not isinstance(value, Iterable):
        raise InvalidInputError(f"depends_on must be a list of job ids (or sq.Earlier(i)), got {type(value).__name__}")
    refs: dict[Reference, None] = {}
    for item in value:
        if isinstance(item, Earlier):
            refs[_earlier(item, position)] = None
        else:
            refs[_validate.job_id(item, "depends_on entry")] = None
    return tuple(refs)


def _earlier(item: Earlier, position: int | None) -> Earlier:
    if position is None:
        raise InvalidInputError("sq.Earlier(i) names an item of the same enqueue_many call; enqueue() has none")
    index = item.index
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < position:
        allowed = f"0 to {position - 1}" if position else "none: it is the first item"
        raise InvalidInputError(
            f"sq.Earlier({index!r}) must name an earlier item of this call ({allowed}); "
            "a job cannot depend on itself or a later one, so a call never forms a cycle")
    return item


def on_dependency_failure(value: Any) -> bool:
    """``on_dependency_failure`` checked: True for "run" (run anyway), False for "cancel"."""
    if value not in ON_DEPENDENCY_FAILURE:
        raise InvalidInputError(
            f"on_dependency_failure must be one of {', '.join(map(repr, ON_DEPENDENCY_FAILURE))}, got {value!r}")
    return value == "run"


def chain_items(steps: Iterable[Any]) -> list[dict[str, Any]]:
    """`Queue.chain`'s steps as ``enqueue_many`` items, each depending on the one before."""
    items: list[dict[str, Any]] = []
    for index, step in enumerate(steps):
        if not (isinstance(step, tuple) and len(step) == 2):
            raise InvalidInputError(f"steps[{index}] must be a (task, payload) pair, got {type(step).__name__}")
        item = {"task": step[0], "payload": step[1]}
        if index:
            item["depends_on"] = [Earlier(index - 1)]
        items.append(item)
    return items


def batch_items(jobs: Iterable[Mapping[str, Any]], on_complete: Any) -> list[dict[str, Any]]:
    """`Queue.batch`'s jobs as ``enqueue_many`` items, the callback last, depending on every
    one of them and run whatever they end as (``on_dependency_failure="run"``)."""
    if isinstance(jobs, (str, bytes, Mapping)) or not isinstance(jobs, Iterable):
        raise InvalidInputError(f"jobs must be a list of job mappings, got {type(jobs).__name__}")
    items = [dict(job) if isinstance(job, Mapping) else job for job in jobs]
    if not items:
        raise InvalidInputError("a batch needs at least one job")
    if not (isinstance(on_complete, tuple) and len(on_complete) == 2):
        raise InvalidInputError(f"on_complete must be a (task, payload) pair, got {type(on_complete).__name__}")
    callback = {"task": on_complete[0], "payload": on_complete[1],
                "depends_on": [Earlier(index) for index in range(len(items))], "on_dependency_failure": "run"}
    return [*items, callback]
