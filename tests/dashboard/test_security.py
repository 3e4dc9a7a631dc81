"""D6 of the adversarial review: the dashboard answers only the hosts it serves (DNS
rebinding), sends security headers on every response, and can protect its pages, not only
its actions, with a password."""

from __future__ import annotations

import base64

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from sqla_queue.cli import main
from sqla_queue.dashboard import basic_auth, create_app

HEADERS = {"x-frame-options": "DENY", "content-security-policy": "frame-ancestors 'none'",
           "x-content-type-options": "nosniff", "referrer-policy": "no-referrer", "cache-control": "no-store"}


def credentials(password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"admin:{password}".encode()).decode()}


@pytest.mark.parametrize("path", ["/", "/jobs", "/jobs/999999", "/static/dashboard.css", "/no-such-page"])
def test_every_response_carries_the_security_headers(dash_queue, path):
    response = TestClient(create_app(dash_queue)).get(path)
    assert {name: response.headers.get(name) for name in HEADERS} == HEADERS, path


def test_a_refused_post_carries_them_too(dash_queue):
    response = TestClient(create_app(dash_queue)).post("/jobs/1/retry", data={})
    assert response.status_code in (403, 400) and response.headers["x-frame-options"] == "DENY"


def test_only_the_allowed_hosts_are_answered(dash_queue):
    app = create_app(dash_queue, allowed_hosts=("127.0.0.1", "localhost", "::1"))
    client = TestClient(app, base_url="http://127.0.0.1:8080")
    assert client.get("/").status_code == 200
    assert client.get("/", headers={"Host": "localhost:8080"}).status_code == 200
    assert client.get("/", headers={"Host": "[::1]:8080"}).status_code == 200
    rebound = client.get("/jobs", headers={"Host": "evil.example:8080"})
    assert rebound.status_code == 400 and "unknown host" in rebound.text
    assert rebound.headers["cache-control"] == "no-store"


def test_read_auth_guards_every_page(dash_queue):
    job_id = dash_queue.enqueue("send_email", {"to": "secret@example.com"})
    client = TestClient(create_app(dash_queue, read_auth=basic_auth("pw")))
    for path in ("/", "/jobs", f"/jobs/{job_id}", "/workers", "/doctor"):
        refused = client.get(path)
        assert refused.status_code == 401 and "secret@example.com" not in refused.text, path
    assert refused.headers["www-authenticate"].startswith("Basic")
    assert client.get(f"/jobs/{job_id}", headers=credentials("wrong")).status_code == 401
    page = client.get(f"/jobs/{job_id}", headers=credentials("pw"))
    assert page.status_code == 200 and "secret@example.com" in page.text


def test_the_command_line_needs_a_password_to_protect_reads(monkeypatch):
    monkeypatch.delenv("SQLA_QUEUE_DASHBOARD_PASSWORD", raising=False)
    result = CliRunner().invoke(main, ["--database-url", "postgresql://nowhere/x", "dashboard", "--protect-reads"])
    assert result.exit_code == 2 and "--protect-reads needs $SQLA_QUEUE_DASHBOARD_PASSWORD" in result.output
