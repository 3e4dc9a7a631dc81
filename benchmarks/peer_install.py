"""The peers of ``python -m benchmarks --peers``, each installed at a pinned version in an
environment of its own under a cache directory, never in the benchmark's own environment.

* pgqueuer (PyPI) with its asyncpg driver, in a venv: ``<cache>/pgqueuer-<version>/``.
* graphile-worker (npm), in a directory with its own ``node_modules``:
  ``<cache>/graphile-worker-<version>/``; needs ``node`` and ``npm`` on PATH (0.17 runs on
  Node 14 and later; 0.18 needs Node 22.18, hence the pin).

The cache is ``$SQLA_QUEUE_BENCH_CACHE`` or ``~/.cache/sqla_queue_bench/peers``. An environment
whose recorded pin matches is reused as it is; one with another pin (or a half-finished install)
is removed and installed again, so changing a pin here is all it takes to move a peer on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass, field
from pathlib import Path

PGQUEUER_VERSION = "1.6.0"
# typer 0.29 (a later release than pgqueuer 1.6.0) breaks `pgq run`: the --log-level default
# reaches pgqueuer as a str ("AttributeError: 'str' object has no attribute 'name'"); 0.28.0 works.
PGQUEUER_REQUIREMENTS = (f"pgqueuer[asyncpg]=={PGQUEUER_VERSION}", "typer==0.28.0")
GRAPHILE_WORKER_VERSION = "0.17.3"
MIN_NODE_MAJOR = 14  # graphile-worker 0.17's engines field

SCRIPTS = Path(__file__).resolve().parent / "peer_scripts"
MARKER = "sqla_queue_bench_pin.json"  # written last: its presence means the install finished


@dataclass
class PeerEnv:
    """One installed peer: where it lives, how to run it, what exactly was installed."""

    name: str
    version: str
    root: Path
    versions: dict[str, str] = field(default_factory=dict)  # every component worth reporting

    @property
    def python(self) -> Path:  # pgqueuer
        return self.root / "bin" / "python"

    @property
    def pgq(self) -> Path:
        return self.root / "bin" / "pgq"

    @property
    def graphile_cli(self) -> Path:
        return self.root / "node_modules" / ".bin" / "graphile-worker"


def cache_dir() -> Path:
    given = os.environ.get("SQLA_QUEUE_BENCH_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "sqla_queue_bench" / "peers"


def pin_record(name: str, pins: dict) -> dict:
    """What the marker file holds: the peer and its exact pins (a changed pin reinstalls)."""
    return {"peer": name, "pins": pins}


def is_installed(root: Path, record: dict) -> bool:
    try:
        return json.loads((root / MARKER).read_text()) == record
    except (OSError, ValueError):
        return False


def graphile_package_json(version: str = GRAPHILE_WORKER_VERSION) -> dict:
    """The install directory's package.json: graphile-worker at exactly `version`."""
    return {"name": "sqla-queue-bench-graphile-worker", "private": True,
            "description": "graphile-worker for python -m benchmarks --peers",
            "dependencies": {"graphile-worker": version}}


def node_major(version_output: str) -> int:
    """``v20.11.1`` -> 20."""
    text = version_output.strip()
    if not text.startswith("v") or not text[1:].split(".")[0].isdigit():
        raise ValueError(f"cannot read a Node.js version from {version_output!r}")
    return int(text[1:].split(".")[0])


def install_pgqueuer(log, cache: Path | None = None) -> PeerEnv:
    root = (cache or cache_dir()) / f"pgqueuer-{PGQUEUER_VERSION}"
    record = pin_record("pgqueuer", {"requirements": list(PGQUEUER_REQUIREMENTS),
                                     "python": f"{sys.version_info.major}.{sys.version_info.minor}"})
    if not is_installed(root, record):
        log(f"installing {', '.join(PGQUEUER_REQUIREMENTS)} into {root}")
        shutil.rmtree(root, ignore_errors=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(root)
        _run([str(root / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              *PGQUEUER_REQUIREMENTS], what="pip install pgqueuer")
        (root / MARKER).write_text(json.dumps(record))
    env = PeerEnv("pgqueuer", PGQUEUER_VERSION, root)
    found = _run([str(env.python), "-c", "import importlib.metadata as m, json; print(json.dumps("
                  "{p: m.version(p) for p in ('pgqueuer', 'asyncpg', 'typer')}))"], what="pgqueuer version check")
    env.versions = json.loads(found.strip().splitlines()[-1])
    if env.versions["pgqueuer"] != PGQUEUER_VERSION:
        raise RuntimeError(f"{root} holds pgqueuer {env.versions['pgqueuer']}, not the pinned {PGQUEUER_VERSION}")
    env.versions["python"] = _run([str(env.python), "-c", "import platform; print(platform.python_version())"],
                                  what="python version").strip()
    return env


def install_graphile_worker(log, cache: Path | None = None) -> PeerEnv:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise RuntimeError("graphile-worker needs node and npm on PATH (Node.js 14 or later)")
    node_version = _run([node, "--version"], what="node --version").strip()
    if node_major(node_version) < MIN_NODE_MAJOR:
        raise RuntimeError(f"graphile-worker {GRAPHILE_WORKER_VERSION} needs Node.js >= {MIN_NODE_MAJOR}, "
                           f"found {node_version}")
    root = (cache or cache_dir()) / f"graphile-worker-{GRAPHILE_WORKER_VERSION}"
    record = pin_record("graphile-worker", {"package.json": graphile_package_json()})
    if not is_installed(root, record):
        log(f"installing graphile-worker@{GRAPHILE_WORKER_VERSION} into {root} (npm)")
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        (root / "package.json").write_text(json.dumps(graphile_package_json(), indent=2) + "\n")
        _run([npm, "install", "--no-audit", "--no-fund", "--omit=dev", "--save-exact", "--loglevel=error"],
             what="npm install graphile-worker", cwd=root)
        (root / MARKER).write_text(json.dumps(record))
    env = PeerEnv("graphile-worker", GRAPHILE_WORKER_VERSION, root)
    installed = json.loads((root / "node_modules" / "graphile-worker" / "package.json").read_text())["version"]
    if installed != GRAPHILE_WORKER_VERSION:
        raise RuntimeError(f"{root} holds graphile-worker {installed}, not the pinned {GRAPHILE_WORKER_VERSION}")
    env.versions = {"graphile-worker": installed, "node": node_version.lstrip("v")}
    # The benchmark's task, configuration and enqueue script, beside the node_modules they need.
    shutil.copytree(SCRIPTS / "graphile", root / "bench", dirs_exist_ok=True)
    return env


def _run(argv: list[str], *, what: str, cwd: Path | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return done.stdout
