"""A git ref's sqla_queue in a virtual environment of its own, for ``python -m benchmarks compare``.

The ref is checked out into a temporary ``git worktree``, installed from there (not editable)
into a venv, and the worktree removed again. The venv is cached under
``$SQLA_QUEUE_BENCH_CACHE/compare`` (default ``~/.cache/sqla_queue_bench/compare``), keyed by the
commit and by the environment that runs the comparison, and reused while it still imports.

Only sqla_queue is installed there (``--no-deps``): its dependencies are those of the
environment running the comparison, through a ``.pth`` line, so both sides run the same
SQLAlchemy, psycopg and alembic and the ratios measure sqla_queue's own code.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[1]
MARKER = "sqla_queue_bench_ref.json"  # written last: its presence means the install finished
DEPS_PTH = "sqla_queue_bench_deps.pth"


def resolve(ref: str, repo: Path = REPO) -> str:
    """The full commit `ref` names in `repo`; SystemExit when it names none."""
    done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=repo,
                          capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"python -m benchmarks compare: {ref!r} names no commit in {repo}")
    return done.stdout.strip()


def cache_dir() -> Path:
    given = os.environ.get("SQLA_QUEUE_BENCH_CACHE")
    base = Path(given) if given else Path.home() / ".cache" / "sqla_queue_bench"
    return base / "compare"


def dependencies_dir() -> str:
    """Where this environment's packages live: the REF venv's dependencies."""
    return sysconfig.get_paths()["purelib"]


def env_root(commit: str) -> Path:
    deps = hashlib.sha256(dependencies_dir().encode()).hexdigest()[:10]
    return cache_dir() / f"{commit[:12]}-{deps}"


def ref_environment(commit: str, log, repo: Path = REPO) -> Path:
    """The bin directory of a venv with `commit`'s sqla_queue: cached, or built now."""
    root = env_root(commit)
    root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(root.with_suffix(".lock")):
        if _usable(root, commit):
            log(f"compare: reusing the environment of {commit[:12]} in {root}")
            return root / "bin"
        shutil.rmtree(root, ignore_errors=True)
        log(f"compare: installing sqla_queue at {commit[:12]} into {root}")
        _build(root, commit, repo)
        (root / MARKER).write_text(json.dumps({"commit": commit, "dependencies": dependencies_dir()}))
    return root / "bin"


def _build(root: Path, commit: str, repo: Path) -> None:
    venv.create(root, with_pip=False, symlinks=True)
    site = Path(_python_says(root, "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    (site / DEPS_PTH).write_text(dependencies_dir() + "\n")
    with tempfile.TemporaryDirectory(prefix="sqlaq-compare-") as tmp:
        tree = Path(tmp) / "tree"
        _git(repo, "worktree", "add", "--detach", "--quiet", str(tree), commit)
        try:
            subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install",
                            "--quiet", "--no-deps", str(tree)], check=True, cwd=tmp)
        finally:
            _git(repo, "worktree", "remove", "--force", str(tree))


def _usable(root: Path, commit: str) -> bool:
    """Finished for this commit and these dependencies, and its sqla_queue imports from itself."""
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return False
    if marker != {"commit": commit, "dependencies": dependencies_dir()}:
        return False
    try:
        where = _python_says(root, "import sqla_queue, sqlalchemy; print(sqla_queue.__file__)")
    except RuntimeError:
        return False
    return Path(where).resolve().is_relative_to(root.resolve())


def _python_says(root: Path, code: str) -> str:
    """What the venv's python prints for `code`, run outside any checkout."""
    done = subprocess.run([str(root / "bin" / "python"), "-c", code], capture_output=True, text=True, cwd=root)
    if done.returncode != 0:
        raise RuntimeError(f"{root}/bin/python -c {code!r}: {done.stderr[-2000:]}")
    return done.stdout.strip()


def _git(repo: Path, *args: str) -> None:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder per environment at a time (two test processes may compare against HEAD)."""
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
