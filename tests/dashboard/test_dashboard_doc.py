"""docs/how-to/dashboard.md, run as written: its app module, both commands (each serves the
page it describes on the port it names), and the FastAPI mount; plus the CLI's refusals."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import doc_blocks

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "dashboard.md"
SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))


@pytest.fixture
def app_dir(tmp_path, dash_database, dash_queue, monkeypatch):
    """``myapp/jobs.py`` from the page, importable here and in the commands it runs."""
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(doc_blocks.blocks(DOC, "python")[0])
    monkeypatch.setenv("SQLA_QUEUE_DATABASE_URL", dash_database)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("myapp", "myapp.jobs"):
        sys.modules.pop(name, None)
    yield tmp_path
    for name in ("myapp", "myapp.jobs"):
        sys.modules.pop(name, None)


def test_the_page_shows_these_commands():
    assert doc_blocks.console_commands(DOC) == [
        "sqla-queue --app myapp.jobs:queue dashboard --port 8080",
        "SQLA_QUEUE_DASHBOARD_PASSWORD=change-me sqla-queue --app myapp.jobs:queue dashboard --port 8080",
    ]


def serve(command: str, cwd: Path) -> subprocess.Popen:
    words = shlex.split(command)
    env = {k: v for k, v in os.environ.items() if k != "SQLA_QUEUE_DASHBOARD_PASSWORD"}
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[0] == "sqla-queue"
    return subprocess.Popen([SCRIPT, *words[1:]], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def get(url: str, process: subprocess.Popen, auth: str | None = None) -> tuple[int, str]:
    """GET once the server answers (it is starting); its exit fails the test with its output."""
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"} if auth else {})
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError:
            if process.poll() is not None:
                pytest.fail(f"the dashboard exited: {process.communicate()}")
            if time.monotonic() > deadline:
                pytest.fail("the dashboard did not answer within a minute")
            time.sleep(0.1)


def stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    return stderr


@pytest.mark.parametrize("number", [0, 1])
def test_each_command_serves_the_dashboard_it_describes(app_dir, dash_queue, number):
    command = doc_blocks.console_commands(DOC)[number]
    dash_queue.enqueue("send_email", {"to": "a@example.com"}, queue="emails")
    process = serve(command, app_dir)
    try:
        status, page = get("http://127.0.0.1:8080/", process)
        assert status == 200 and ">emails</a>" in page and "read-only" in page
        status, _ = get("http://127.0.0.1:8080/signin", process)
        if number == 0:
            assert status == 200 and "Sign in" not in page  # nothing to sign in to: read-only
        else:
            assert status == 401 and "Sign in" in page
            import base64

            credentials = base64.b64encode(b"admin:change-me").decode()
            _, signed_in = get("http://127.0.0.1:8080/jobs", process, auth=credentials)
            assert 'class="mode mode-operator"' in signed_in
    finally:
        stderr = stop(process)
    assert "sqla-queue dashboard on http://127.0.0.1:8080/" in stderr


def test_the_fastapi_mount_runs_as_written(app_dir, dash_queue):
    namespace: dict = {}
    exec(compile(doc_blocks.blocks(DOC, "python")[1], str(DOC), "exec"), namespace)
    dash_queue.enqueue("send_email", {"to": "a@example.com"}, queue="emails")
    client = TestClient(namespace["app"])
    page = client.get("/admin/jobs/")
    assert page.status_code == 200 and "shop jobs" in page.text and "read-only" in page.text
    assert 'href="/admin/jobs/static/dashboard.css"' in page.text
    operator = client.get("/admin/jobs/jobs", headers={"x-role": "operator"})
    assert 'class="mode mode-operator"' in operator.text


def test_allow_actions_is_refused_off_loopback(dash_database):
    result = subprocess.run([SCRIPT, "--database-url", dash_database, "dashboard", "--host", "0.0.0.0",
                             "--allow-actions"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--allow-actions lets anyone act: only with a loopback --host" in result.stderr
