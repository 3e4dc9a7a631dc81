"""Claims, outcomes, recovery and the worker's round: every one commits on its own, so these
tests run on committed data."""

import pytest


@pytest.fixture
def queue(committed_queue):
    """Tests here commit (workers, claims, outcomes, other processes): `queue` is the committed
    one, on an empty job table (see tests/conftest.py)."""
    return committed_queue
