"""Every CLI option that takes a duration reads it the same way: ``250ms``, ``90s``, ``15m``,
``12h``, ``7d`` or plain seconds, and a bad value is a usage error naming the option.

The options are found by walking the command tree, so a new duration option is covered (and
one typed as a float instead fails `test_no_option_takes_a_bare_float`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click
import pytest

from sqla_queue.cli import main
from sqla_queue.cli._params import Duration

SCRIPT = str(Path(sys.executable).with_name("sqla-queue"))
REQUIRED_ARGS = {"enqueue": ["send_email"]}  # arguments a command cannot parse without


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    """Every command, as click finds them (the root group imports each module on demand)."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _duration_options():
    for path, command in _commands(main):
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type, Duration):
                yield pytest.param(path, command, param.opts[0], param.name, id=f"{' '.join(path)} {param.opts[0]}")


DURATION_OPTIONS = list(_duration_options())


def parse(command: click.Command, path: tuple[str, ...], *args: str) -> dict:
    """The command's parsed parameters, as click hands them to it (the command does not run)."""
    ctx = command.make_context(path[-1], [*REQUIRED_ARGS.get(path[-1], []), *args])
    return ctx.params


def test_every_known_duration_option_uses_the_duration_type():
    found = {case.id for case in DURATION_OPTIONS}
    assert {
        "worker --lease", "worker --poll-interval", "worker --grace", "enqueue --delay", "recover --lease",
        "stats --window", "stats --watch", "doctor --lease", "doctor --max-transaction-age",
        "doctor --max-lock-wait", "prune --completed-older-than", "prune --failed-older-than",
        "prune --counters-older-than",
    } <= found


def test_no_option_takes_a_bare_float():
    floats = [
        f"{' '.join(path)} {param.opts[0]}"
        for path, command in _commands(main)
        for param in command.params
        if isinstance(param.type, (click.types.FloatParamType, click.FloatRange))
    ]
    assert floats == []


@pytest.mark.parametrize(("path", "command", "flag", "name"), DURATION_OPTIONS)
@pytest.mark.parametrize(
    ("value", "expected"),
    [("90s", timedelta(seconds=90)), ("1.5", timedelta(seconds=1.5)), ("2m", timedelta(minutes=2)),
     ("250ms", timedelta(milliseconds=250)), ("12h", timedelta(hours=12)), ("7d", timedelta(days=7))],
)
def test_each_duration_option_parses_units_and_plain_seconds(path, command, flag, name, value, expected):
    assert parse(command, path, flag, value)[name] == expected


@pytest.mark.parametrize(("path", "command", "flag", "name"), DURATION_OPTIONS)
@pytest.mark.parametrize(
    ("value", "reason"),
    [("abc", "is not a duration; use seconds, or a number with ms, s, m, h or d"),
     ("-1", "is negative; a duration is seconds, or"), ("-5m", "is negative"), ("5 parsecs", "is not a duration"), ("1e400", "is not a duration")],
)
def test_each_duration_option_rejects_bad_values_naming_the_option(path, command, flag, name, value, reason):
    with pytest.raises(click.BadParameter) as error:
        parse(command, path, flag, value)
    message = error.value.format_message()
    assert message.startswith(f"Invalid value for '{flag}': '{value}' ")
    assert reason in message


@pytest.mark.parametrize(("path", "command", "flag", "name"), DURATION_OPTIONS)
def test_zero_is_a_duration_only_for_delay(path, command, flag, name):
    if flag == "--delay":
        assert parse(command, path, flag, "0")[name] == timedelta(0)
    else:
        with pytest.raises(click.BadParameter, match="'0' must be longer than zero"):
            parse(command, path, flag, "0")


@pytest.mark.parametrize(("path", "command", "flag", "name"), DURATION_OPTIONS)
def test_help_says_the_format(path, command, flag, name):
    ctx = click.Context(command, info_name=path[-1])
    assert "250ms, 90s, 15m, 12h, 7d, or plain seconds" in " ".join(command.get_help(ctx).split())


APP = textwrap.dedent(
    """
    import os
    import sqla_queue as sq

    queue = sq.Queue(os.environ["APP_DATABASE_URL"], load_entrypoints=False)

    @queue.task
    def send_email(payload, ctx):
        pass
    """
)


@pytest.fixture
def cli(tmp_path, database_url, clean_jobs):
    (tmp_path / "durationapp.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLA_QUEUE_")}
    env["APP_DATABASE_URL"] = database_url

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([SCRIPT, "--app", "durationapp:queue", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    return run


def test_enqueue_delay_with_a_unit_schedules_the_job(cli, queue):
    before = datetime.now(timezone.utc)
    result = cli("enqueue", "send_email", "{}", "--delay", "2m")
    assert result.returncode == 0, result.stderr
    run_at = queue.get_job(int(result.stdout)).run_at
    assert timedelta(minutes=1) < run_at - before < timedelta(minutes=3)  # database clock, loosely


def test_worker_runs_with_durations_in_units(cli, queue, count_jobs):
    cli("enqueue", "send_email", "{}")
    result = cli("worker", "--until-empty", "--lease", "2m", "--poll-interval", "250ms", "--grace", "5s")
    assert result.returncode == 0, result.stderr
    assert "completed 1" in result.stdout
    assert count_jobs("status = 'completed'") == 1


def test_a_bad_duration_is_one_line_exit_2(cli, count_jobs):
    result = cli("recover", "--lease", "abc")
    assert result.returncode == 2
    assert "Invalid value for '--lease': 'abc' is not a duration" in result.stderr
    assert "Traceback" not in result.stderr
    result = cli("enqueue", "send_email", "{}", "--delay", "-1")
    assert result.returncode == 2
    assert "Invalid value for '--delay': '-1' is negative; a duration is seconds, or" in result.stderr
    assert count_jobs() == 0
