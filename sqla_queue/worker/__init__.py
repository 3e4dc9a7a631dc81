"""The worker: claims into free slots, runs handlers outside any transaction, records each
outcome under its claim token, keeps leases alive and shuts down gracefully."""

from .config import WorkerConfig, WorkerSummary
from .worker import Worker, claim_position

__all__ = ["Worker", "WorkerConfig", "WorkerSummary", "claim_position"]
