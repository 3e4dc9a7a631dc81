"""The two sides of ``python -m benchmarks compare``, each a virtual environment built the same way.

A side's venv has no packages of its own: ``site-packages/sqla_queue`` is a symbolic link to a
checkout's package directory, a ``.pth`` line adds the packages of the environment running the
comparison (SQLAlchemy, psycopg, alembic...), and ``bin/sqla-queue`` is the console script. So
both sides start the same interpreter with the same dependencies and the same import path, and
differ only in sqla_queue's source.

* REF: its commit is checked out into a temporary ``git worktree``, whose ``sqla_queue/`` is
  copied into ``$SQLA_QUEUE_BENCH_CACHE/compare`` (default ``~/.cache/sqla_queue_bench/compare``)
  before the worktree is removed; the copy and its venv are keyed by the commit and by the
  environment that runs the comparison, and reused while they import.
* The working tree: a venv in the run's temporary directory, linked to this repository's
  ``sqla_queue/``, uncommitted changes included.

(An editable install, as in a developer's ``.venv``, would not do for either side: its import
hook alone costs tens of milliseconds at every process start, which the drain counts.)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
import venv
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[1]
MARKER = "sqla_queue_bench_ref.json"  # written last: its presence means the copy finished
DEPS_PTH = "sqla_queue_bench_deps.pth"
CONSOLE_SCRIPT = """#!{python}
import sys

from sqla_queue.cli import run

sys.exit(run())
"""


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
    """Where this environment's packages live: both sides' dependencies."""
    return sysconfig.get_paths()["purelib"]


def side_environment(root: Path, package: Path) -> Path:
    """A venv at `root` whose sqla_queue is `package` (a checkout's ``sqla_queue/``); its bin directory."""
    venv.create(root, with_pip=False, symlinks=True, clear=True)
    site = Path(_python_says(root, "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    (site / DEPS_PTH).write_text(dependencies_dir() + "\n")
    (site / "sqla_queue").symlink_to(package, target_is_directory=True)
    script = root / "bin" / "sqla-queue"
    script.write_text(CONSOLE_SCRIPT.format(python=root / "bin" / "python"))
    script.chmod(0o755)
    return root / "bin"


def tree_environment(root: Path, repo: Path = REPO) -> Path:
    return side_environment(root, repo / "sqla_queue")


def ref_environment(commit: str, log, repo: Path = REPO) -> Path:
    """The bin directory of a venv with `commit`'s sqla_queue: cached, or checked out now (the
    cache holds no git worktree: nothing is left registered in the repository)."""
    deps = hashlib.sha256(dependencies_dir().encode()).hexdigest()[:10]
    root = cache_dir() / f"{commit[:12]}-{deps}"
    root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(root.with_suffix(".lock")):
        if _usable(root, commit):
            log(f"compare: reusing the checkout of {commit[:12]} in {root}")
            return root / "bin"
        shutil.rmtree(root, ignore_errors=True)
        log(f"compare: checking out {commit[:12]} (its sqla_queue/ to {root})")
        with tempfile.TemporaryDirectory(prefix="sqlaq-compare-") as tmp:
            tree = Path(tmp) / "tree"
            _git(repo, "worktree", "add", "--detach", "--quiet", str(tree), commit)
            try:
                shutil.copytree(tree / "sqla_queue", root / "src" / "sqla_queue",
                                ignore=shutil.ignore_patterns("__pycache__"))
            finally:
                _git(repo, "worktree", "remove", "--force", str(tree))
        side_environment(root / "venv", root / "src" / "sqla_queue")
        (root / MARKER).write_text(json.dumps({"commit": commit, "dependencies": dependencies_dir()}))
    return root / "venv" / "bin"


def _usable(root: Path, commit: str) -> bool:
    """Finished for this commit and these dependencies, and its sqla_queue imports from its copy."""
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return False
    if marker != {"commit": commit, "dependencies": dependencies_dir()}:
        return False
    try:
        where = _python_says(root / "venv", "import sqla_queue, sqlalchemy; print(sqla_queue.__file__)")
    except (OSError, RuntimeError):
        return False
    return Path(where).resolve().is_relative_to((root / "src").resolve())


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
    """One builder per checkout at a time (two test processes may compare against HEAD)."""
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
