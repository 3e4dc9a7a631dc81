"""The runner's server restart fault on a real server of its own: a restart that pg_ctl reports
as failed still leaves the seed a live server, whether the server came back by itself or not."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from sqla_queue.testing import embedded_server
from sqla_queue.testing._embedded import EmbeddedServer
from sqla_queue.testing.chaos import events
from sqla_queue.testing.chaos.runner import _accepting, _restart


class RestartReportedFailed(EmbeddedServer):
    """pg_ctl's answer is a failure; what the server did is `then`'s: came back, or stayed down."""

    then: str = "came back"

    def restart(self, mode: str = "fast") -> None:
        if self.then == "came back":
            super().restart(mode)
        else:
            self.stop(mode)
        raise subprocess.CalledProcessError(1, ["pg_ctl", "restart"])


@pytest.fixture(scope="module")
def server():
    with embedded_server({"fsync": "off"}) as started:
        yield started


@pytest.mark.parametrize("then", ["came back", "stayed down"])
def test_a_restart_reported_failed_ends_with_the_server_accepting(server, then, tmp_path):
    trace = tmp_path / "events.jsonl"
    failing = RestartReportedFailed(**{f.name: getattr(server, f.name) for f in dataclasses.fields(server)})
    failing.then = then
    _restart(failing, trace, wait=3.0)
    assert [e["event"] for e in events.read(trace)] == ["restart_failed", "server_back"]
    assert _accepting(server, 0)
