"""The console script runs as a separate process: it sees committed data only."""

import pytest


@pytest.fixture
def queue(committed_queue):
    """Tests here commit (workers, claims, outcomes, other processes): `queue` is the committed
    one, on an empty job table (see tests/conftest.py)."""
    return committed_queue
