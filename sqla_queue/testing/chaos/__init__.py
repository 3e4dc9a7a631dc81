"""Seeded fault schedules: real ``sqla-queue worker`` processes, enqueuers and a PostgreSQL of
the runner's own, hurt on a schedule drawn from a seed, then a checker that sorts every job into
classes (lost, duplicated, duplicate effect, stuck, unexpected). docs/explanation/fault-schedules.md.

Modules: `schedule` (seed -> workload and faults), `workload` (the app the workers run), `app`
(--app: your handlers instead of the built-in workload),
`enqueuer` (the enqueuer process), `processes` (process slots and signals), `proxy` (the TCP
proxy between the workers and the server), `runner` (one seed,
start to verdict), `checker` (the classes), `events` (the run's trace), ``__main__`` (the CLI).
"""

from .app import App

__all__ = ["App"]
