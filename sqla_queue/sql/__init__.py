"""Pure statement builders: the only place sqla_queue builds SQL.

Each function takes the job `Table` and returns an `Executable` with named bind parameters.
No engine, no session, no plugin, no I/O: the statements are compiled once per table and reused
(SQLAlchemy's compiled cache keys on their structure). Every user value is a bound parameter;
the only literals are our own status names, rendered inline so the planner can match the partial
indexes' predicates. `sql.session` holds the few statements about the database session itself
(what pool hooks and the listener run), which take no table and no values.
"""

from .claim import claim_jobs, claim_served_jobs, complete_and_claim_jobs
from .enqueue import find_active_keys, insert_job, insert_job_unless_fair, insert_jobs
from .jobs import claim_state, select_job, watch_job
from .lease import release_jobs, renew_leases
from .notify import channel_name, finished_channel, listen, wake_queues
from .outcome import (
    complete_in_handler_transaction,
    complete_job,
    complete_jobs,
    complete_jobs_announced,
    fail_job,
    retry_job,
    snooze_job,
)
from .recover import cancel_expired, fail_exhausted_expired, requeue_expired
from .stats import queue_health

__all__ = [
    "cancel_expired",
    "claim_jobs",
    "claim_served_jobs",
    "channel_name",
    "claim_state",
    "complete_and_claim_jobs",
    "complete_in_handler_transaction",
    "complete_job",
    "complete_jobs",
    "complete_jobs_announced",
    "fail_exhausted_expired",
    "fail_job",
    "find_active_keys",
    "finished_channel",
    "wake_queues",
    "insert_job",
    "insert_job_unless_fair",
    "insert_jobs",
    "listen",
    "queue_health",
    "release_jobs",
    "renew_leases",
    "requeue_expired",
    "retry_job",
    "select_job",
    "snooze_job",
    "watch_job",
]
