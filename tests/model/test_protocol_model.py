"""The protocol model (model/sqla_queue.qnt), checked by Quint's simulator with the commands of
docs/explanation/correctness.md as written: the code's protocol keeps every invariant, the
mutant without the completion's token guard breaks one, and the model names real statements."""

from __future__ import annotations

import fcntl
import importlib
import inspect
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

import doc_blocks

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "model"
SPEC = MODEL / "sqla_queue.qnt"
DOC = ROOT / "docs" / "explanation" / "correctness.md"
QUINT = MODEL / "node_modules" / ".bin" / "quint"
INVARIANTS = ["noDoubleCompletion", "noStaleOutcome", "noneVanish", "oneLiveJobPerKey", "attemptsBounded",
              "effectsOnce"]
WITNESSES = ["staleCompletionFenced", "completionReplayed", "handlerTransactionCommitted",
             "handlerTransactionRolledBack", "keyDeduplicated", "enqueueWentRoundAgain", "expiredLeaseRecovered"]
# The modules whose statements make up the job protocol: each statement in them is modelled.
PROTOCOL_MODULES = ["claim", "enqueue", "outcome", "lease", "recover"]


def commands() -> list[str]:
    return doc_blocks.console_commands(DOC)


def install_command() -> str:
    [command] = [c for c in commands() if c.startswith("npm ")]
    return command


def quint_commands() -> dict[str, str]:
    """The doc's simulator commands by role: the CI run, the mutant run, the long run."""
    runs = [c for c in commands() if c.startswith("model/node_modules/.bin/quint run ")]
    mutant = [c for c in runs if "--main unfenced_completion" in c]
    checked = [c for c in runs if "--main sqla_queue" in c]
    assert len(mutant) == 1 and len(checked) == 2, runs
    ci, long_run = sorted(checked, key=lambda c: int(_option(c, "--max-samples")))
    return {"ci": ci, "mutant": mutant[0], "long": long_run}


def _option(command: str, name: str) -> str:
    words = shlex.split(command)
    return words[words.index(name) + 1]


@pytest.fixture(scope="module")
def quint() -> Path:
    """The pinned simulator, installed by the doc's own command when missing (one install at a
    time: pytest-xdist may ask from several processes)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is needed to install the Quint simulator (model/package.json): "
                    "apt-get install nodejs npm")
    with open(MODEL / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not QUINT.exists():
            done = subprocess.run(shlex.split(install_command()), cwd=ROOT, capture_output=True, text=True,
                                  timeout=600)
            assert done.returncode == 0, done.stdout + done.stderr
    assert QUINT.exists()
    return QUINT


def run(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(shlex.split(command), cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_COLOR": "1"})


def test_the_doc_shows_the_install_and_the_three_runs():
    assert install_command() == "npm ci --prefix model"
    runs = quint_commands()
    for command in runs.values():
        words = shlex.split(command)
        assert words[2] == "model/sqla_queue.qnt"
        assert _option(command, "--backend") == "typescript"  # the rust backend downloads a binary
        assert words[words.index("--invariants") + 1:][:len(INVARIANTS)] == INVARIANTS
    assert int(_option(runs["long"], "--max-samples")) >= 100_000
    # The long run is the CI run with a bigger budget and no fixed seed: every other word is the
    # CI run's, which test_the_code_keeps_every_invariant runs as written.
    ci_words = shlex.split(runs["ci"])
    seedless = ci_words[:ci_words.index("--seed")] + ci_words[ci_words.index("--seed") + 2:]
    assert shlex.split(runs["long"]) == [
        _option(runs["long"], "--max-samples") if word == _option(runs["ci"], "--max-samples") else word
        for word in seedless
    ]
    # The mutant run differs from the CI run in its module only.
    assert runs["mutant"] == runs["ci"].replace("--main sqla_queue", "--main unfenced_completion")


def test_the_code_keeps_every_invariant(quint):
    command = quint_commands()["ci"]
    done = run(command)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    samples = int(_option(command, "--max-samples"))
    assert "[ok] No violation found" in output, output
    # Not vacuous: the run reached a fenced stale completion, a replay, the handler transaction
    # both ways, a deduplicated key and a recovered lease.
    for witness in WITNESSES:
        found = re.search(rf"^{witness} was witnessed in (\d+) trace\(s\) out of {samples} explored", output, re.M)
        assert found and int(found.group(1)) > 0, f"{witness} never reached:\n{output}"


def test_without_the_token_guard_on_completion_a_stale_outcome_applies(quint):
    done = run(quint_commands()["mutant"])
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "[violation] Found an issue" in output, output
    assert re.search(r"❌ noStaleOutcome", output), output
    assert re.search(r"Use --seed=0x[0-9a-f]+ --backend=typescript to reproduce", output), output


def _named_statements() -> set[tuple[str, str]]:
    """The ``sql/<module>.py:<function>`` references of the model's comments."""
    return set(re.findall(r"sql/([a-z_/]+?)(?:/__init__)?\.py:([a-z_]+)", SPEC.read_text()))


def test_every_statement_the_model_names_exists():
    named = _named_statements()
    assert len(named) >= 15, named
    for module, function in sorted(named):
        statement = getattr(importlib.import_module(f"sqla_queue.sql.{module.replace('/', '.')}"), function, None)
        assert callable(statement), f"model/sqla_queue.qnt names sql/{module}.py:{function}, which does not exist"


def test_every_protocol_statement_is_in_the_model():
    """A new statement in the protocol's modules needs an action (or a named place in one)."""
    named = _named_statements()
    for module in PROTOCOL_MODULES:
        loaded = importlib.import_module(f"sqla_queue.sql.{module}")
        for name, function in inspect.getmembers(loaded, inspect.isfunction):
            if function.__module__ == loaded.__name__ and not name.startswith("_") \
                    and inspect.signature(function).return_annotation == "Executable":
                assert (module, name) in named, f"sql/{module}: {name} is not modelled in model/sqla_queue.qnt"
