"""Schedules enqueue in transactions of their own: tests here see committed data."""

import pytest


@pytest.fixture
def queue(committed_queue):
    """Tests here commit (the scheduler's own transactions, workers, other processes): `queue`
    is the committed one, on empty job and schedule tables (see tests/conftest.py)."""
    return committed_queue
