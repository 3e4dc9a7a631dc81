"""--app: the runner takes your queue and your jobs, and refuses an unusable app before any server
starts, naming what is wrong; the built-in workload's clock kinds behave as their schedule says."""

from __future__ import annotations

import sys
import textwrap

import pytest
from click.testing import CliRunner

import sqla_queue as sq
from sqla_queue.testing import drain
from sqla_queue.testing.chaos import App
from sqla_queue.testing.chaos.__main__ import main, replay_command
from sqla_queue.testing.chaos.app import AppError, check_jobs, job_of, load
from sqla_queue.testing.chaos.workload import build_queue

APP_MODULE = textwrap.dedent('''
    import sqla_queue as sq
    from sqla_queue.testing.chaos import App

    queue = sq.Queue("postgresql+psycopg://app@db.invalid/shop", load_entrypoints=False)

    @queue.task
    def ship(payload, ctx):
        return None

    good = App(queue=queue, job=lambda rng, n: ("ship", {"order": rng.randrange(10_000), "n": n}))
    unknown_task = App(queue=queue, job=lambda rng, n: ("refund", {}))
    list_payload = App(queue=queue, job=lambda rng, n: ("ship", [n]))
    not_json = App(queue=queue, job=lambda rng, n: ("ship", {"at": object()}))
    not_a_pair = App(queue=queue, job=lambda rng, n: "ship")
    raising = App(queue=queue, job=lambda rng, n: {}["order"])
    broken = __import__("sqla_queue").Queue
''')


@pytest.fixture
def app_module(tmp_path, monkeypatch):
    (tmp_path / "chaos_shop.py").write_text(APP_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "chaos_shop"
    sys.modules.pop("chaos_shop", None)


def test_an_app_s_jobs_are_the_same_for_a_seed_in_every_call(app_module):
    app = load(f"{app_module}:good")
    assert isinstance(app, App)
    assert job_of(app, 4, 7) == job_of(app, 4, 7)
    assert [job_of(app, 4, n)[1]["order"] for n in range(20)] != [job_of(app, 5, n)[1]["order"] for n in range(20)]
    check_jobs(app, 4, 50)


@pytest.mark.parametrize("spec, message", [
    ("chaos_shop", "'chaos_shop' is not of the form module.path:attribute"),
    ("no_such_module_here:app", "importing 'no_such_module_here' failed: ModuleNotFoundError"),
    ("chaos_shop:missing", "module 'chaos_shop' has no attribute 'missing'"),
    ("chaos_shop:queue", "chaos_shop:queue is a Queue, not a sqla_queue.testing.chaos.App"),
])
def test_a_spec_that_names_no_app_is_refused(app_module, spec, message):
    with pytest.raises(AppError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        load(spec)


@pytest.mark.parametrize("attribute, message", [
    ("unknown_task", "job(0) names task 'refund', which the app's queue has not registered (registered: ship)"),
    ("list_payload", "job(0) gave a list payload, not a mapping"),
    ("not_json", "job(0) gave a payload that is not JSON"),
    ("not_a_pair", "job(0) returned 'ship', not a (task name, payload) tuple"),
    ("raising", "job(0) raised KeyError: 'order'"),
])
def test_jobs_the_app_cannot_enqueue_are_refused_before_anything_starts(app_module, attribute, message, tmp_path):
    with pytest.raises(AppError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        check_jobs(load(f"{app_module}:{attribute}"), 1, 5)
    logs = tmp_path / "logs"
    result = CliRunner().invoke(main, ["--app", f"{app_module}:{attribute}", "--out", str(logs)])
    assert result.exit_code == 2
    assert "Invalid value for --app: " + message in result.output
    assert not logs.exists()


def test_the_replay_command_of_an_app_seed_names_the_app():
    assert replay_command(3, 20, "shop.chaos:app") == (
        "python -m sqla_queue.testing.chaos --seeds 1 --seed 3 --jobs 20 --json --app shop.chaos:app")


def test_a_snoozing_job_snoozes_as_often_as_its_plan_says_then_completes(own_database, tmp_path):
    _, engine = own_database
    queue = build_queue(engine, str(tmp_path / "events.jsonl"))
    job_id = queue.enqueue("chaos_snoozing", {"snoozes": 2, "snooze": 0.05})
    outcomes = [ran.outcome for ran in drain(queue, advance=1.0)]
    assert outcomes == ["snoozed", "snoozed", "completed"]
    view = queue.get_job(job_id)
    assert (view.status, view.snoozes, view.attempts) == (sq.JobStatus.COMPLETED, 2, 1)

