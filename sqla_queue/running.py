"""Running one claimed job in the calling thread, exactly as a worker runs it: the public face
of the runner the worker and `sqla_queue.testing` share (`_job_run`), for tools that run jobs
without a worker.

`run_claimed_job(queue, job, *, await_coroutine=None)` runs a `ClaimedJob` this process claimed
(its handler with a real `JobContext`, ``ctx.transaction()`` included), records the outcome
under the claim token and returns a `Ran`: the job, its ``outcome`` (``"completed"``,
``"retried"``, ``"failed"``, ``"cancelled"``, ``"snoozed"`` or ``"lost"``), the handler's
result and the error it raised. `await_coroutine` runs an ``async def`` handler's coroutine to
its end (default: `asyncio.run`).
"""

from ._job_run import Ran, run_claimed_job

__all__ = ["Ran", "run_claimed_job"]
