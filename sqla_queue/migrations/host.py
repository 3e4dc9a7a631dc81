"""The queue's schema copied into a host's own Alembic history (``sqla-queue alembic install``).

A host with an Alembic environment of its own gets the queue's schema as ordinary revisions in
its own versions directory, on its own head: its history stays linear, so ``alembic revision``
and ``alembic upgrade head`` work as they did before. The content is generated from the
revisions shipped in `sqla_queue.migrations` (whatever they are: nothing here names a table)
by running each one against a recorder instead of a database and rendering the recorded
operations with Alembic's own autogenerate renderers. The written file imports only alembic and
sqlalchemy, and names the queue revision it brings in `MARKER`, so `update` knows where to start.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic.autogenerate import render_op_text, renderers
from alembic.autogenerate.api import AutogenContext
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.operations.ops import MigrateOperation
from alembic.script import Script, ScriptDirectory
from alembic.util import CommandError

from alembic import util

from . import script_directory

MARKER = "sqla_queue_schema"
"""Module-level name, in each generated host revision, of the queue revision it brings."""

_RENDER_OPTS = {
    "sqlalchemy_module_prefix": "sa.",
    "alembic_module_prefix": "op.",
    "user_module_prefix": None,
    "render_item": None,
    "render_as_batch": False,
}


class HostError(CommandError):
    """The host's project cannot take the generated revision (nothing was written)."""


# -- recording the shipped revisions -----------------------------------------------------------


class AutocommitBlockOp(MigrateOperation):
    """Operations a shipped revision ran inside ``op.get_context().autocommit_block()``
    (``CREATE INDEX CONCURRENTLY``): rendered inside the same block, so they still run outside
    a transaction in the host's environment."""

    def __init__(self, operations: list[MigrateOperation]) -> None:
        self.ops = operations


@renderers.dispatch_for(AutocommitBlockOp)
def _render_autocommit_block(autogen_context: AutogenContext, op: AutocommitBlockOp) -> str:
    body = "\n".join(render_op_text(autogen_context, inner) for inner in op.ops) or "pass"
    return "with op.get_context().autocommit_block():\n" + textwrap.indent(body, "    ")


class _RecordingContext:
    """What ``op.get_context()`` returns while recording: its autocommit block nests the
    operations run inside it; anything else is the offline context's."""

    def __init__(self, stack: list[list[MigrateOperation]], context: MigrationContext) -> None:
        self._stack = stack
        self._context = context

    @contextmanager
    def autocommit_block(self) -> Iterator[None]:
        self._stack.append([])
        try:
            yield
        finally:
            inner = self._stack.pop()
            self._stack[-1].append(AutocommitBlockOp(inner))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def _refuse_bind() -> Any:
    raise HostError("a shipped revision reads the database; it cannot be copied into a host history")


def record(script: Script, direction: str) -> list[MigrateOperation]:
    """The operations `script`'s ``upgrade`` or ``downgrade`` function performs, in order.

    ``op`` is an ordinary `Operations` on an offline context whose ``invoke`` keeps each
    operation object instead of running it.
    """
    context = MigrationContext.configure(dialect_name="postgresql", opts={"as_sql": True})
    stack: list[list[MigrateOperation]] = [[]]
    recorder = Operations(context)
    recorder.invoke = lambda operation: stack[-1].append(operation)  # type: ignore[method-assign]
    recorder.get_context = lambda: _RecordingContext(stack, context)  # type: ignore[method-assign]
    recorder.get_bind = _refuse_bind  # type: ignore[method-assign]
    recorder._install_proxy()
    try:
        getattr(script.module, direction)()
    finally:
        recorder._remove_proxy()
    return stack[0]


# -- rendering ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """Template variables for the host's ``script.py.mako``."""

    upgrades: str
    downgrades: str
    imports: str


def shipped(after: str | None, to: str) -> list[Script]:
    """The shipped revisions after `after` (None: from the first) up to `to`, oldest first."""
    scripts = script_directory()
    _known(scripts, to)
    if after is not None:
        _known(scripts, after)
    chain = list(reversed(list(scripts.walk_revisions("base", to))))
    ids = [script.revision for script in chain]
    if after is not None:
        if after not in ids:
            raise HostError(f"{to} does not follow {after}: nothing to bring")
        chain = chain[ids.index(after) + 1 :]
    return chain


def render(chain: list[Script], target: str) -> Rendered:
    """Upgrade (oldest first) and downgrade (newest first) bodies bringing `chain`'s schema."""
    offline = MigrationContext.configure(dialect_name="postgresql", opts={"as_sql": True})
    context = AutogenContext(offline, opts=dict(_RENDER_OPTS), autogenerate=False)
    context.imports = set()
    up = [_section(context, script, record(script, "upgrade")) for script in chain]
    down = [_section(context, script, record(script, "downgrade")) for script in reversed(chain)]
    marker = (
        "\n# The sqla_queue schema revision this file brings (read by `sqla-queue alembic update`"
        "\n# and `sqla-queue db current`). Frozen once applied: a newer queue schema comes in a new"
        f"\n# revision from `sqla-queue alembic update`.\n{MARKER} = {target!r}"
    )
    imports = "\n".join(sorted(context.imports))
    return Rendered(
        upgrades=_indented("\n\n".join(up)),
        downgrades=_indented("\n\n".join(down)),
        imports=f"{imports}\n{marker}" if imports else marker,
    )


def _indented(body: str) -> str:
    """`body` for a template line that is already indented once (``    ${upgrades}``)."""
    return textwrap.indent(body, "    ").strip()


def _section(context: AutogenContext, script: Script, operations: list[MigrateOperation]) -> str:
    lines = [heading(script)]
    try:
        lines += [render_op_text(context, operation) for operation in operations] or ["pass"]
    except ValueError as exc:  # Alembic has no renderer for this kind of operation
        raise HostError(f"{script.revision} cannot be copied into a host history: {exc}") from None
    return "\n".join(lines)


def heading(script: Script) -> str:
    """The comment that opens a shipped revision's part of a generated file."""
    return f"# {script.revision}: {script.doc}"


def _known(scripts: ScriptDirectory, revision: str) -> None:
    try:
        scripts.get_revision(revision)
    except util.CommandError:
        raise HostError(f"{revision!r} is not a revision of the queue's schema") from None


# -- the host's project ----------------------------------------------------------------------


def host_config(path: str | Path) -> Config:
    """The host's Alembic configuration from its ``alembic.ini`` (or pyproject.toml)."""
    path = Path(path)
    if not path.is_file():
        raise HostError(
            f"no Alembic configuration at {path}: run this in your project's directory, or pass "
            "--config path/to/alembic.ini (no Alembic yet? `alembic init migrations` first)"
        )
    config = Config(str(path))
    if not config.get_main_option("script_location"):
        pyproject = path.parent / "pyproject.toml"
        config = Config(str(path), toml_file=str(pyproject)) if pyproject.is_file() else config
    if not config.get_alembic_option("script_location"):
        raise HostError(f"{path} has no script_location: is it an Alembic configuration?")
    return config


def host_scripts(config: Config) -> ScriptDirectory:
    try:
        return ScriptDirectory.from_config(config)
    except util.CommandError as exc:
        raise HostError(f"cannot read your Alembic environment: {exc}") from None


def installed(scripts: ScriptDirectory) -> str | None:
    """The queue revision brought by the newest generated revision in the host's history."""
    for script in scripts.walk_revisions():
        marker = getattr(script.module, MARKER, None)
        if marker is not None:
            return str(marker)
    return None


def schema_at(scripts: ScriptDirectory, heads: tuple[str, ...]) -> str | None:
    """The queue's schema at the host revisions `heads` (the database's ``alembic_version``):
    the nearest generated revision's marker, or the queue's own revision (the branch way, where
    a host revision that ``depends_on`` ours hides it). None: not at or below `heads`."""
    ours = {script.revision for script in script_directory().walk_revisions()}
    try:
        below = list(scripts.walk_revisions("base", heads))
    except util.CommandError as exc:
        raise HostError(f"your Alembic history does not match the database's: {exc}") from None
    for script in below:
        marker = getattr(script.module, MARKER, None)
        if marker is not None or script.revision in ours:
            return str(marker or script.revision)
    return None


def uses_branch(scripts: ScriptDirectory) -> bool:
    """True if the host's history holds the shipped revisions themselves (the branch way)."""
    ours = {script.revision for script in script_directory().walk_revisions()}
    return bool(ours & {script.revision for script in scripts.walk_revisions()})


def single_head(scripts: ScriptDirectory) -> str | None:
    heads = scripts.get_heads()
    if len(heads) > 1:
        raise HostError(
            f"your history has {len(heads)} heads ({', '.join(heads)}): merge them first "
            "(`alembic merge heads -m merge`), so the queue's revision has one parent"
        )
    return heads[0] if heads else None


def write(
    config: Config, *, after: str | None, to: str, message: str, rev_id: str | None = None,
    version_path: str | None = None,
) -> Script:
    """Write the host revision bringing the queue's schema from `after` to `to`, on the host's
    single head; checked by loading it back (a removed file if the template lost the marker)."""
    scripts = host_scripts(config)
    head = single_head(scripts)
    chain = shipped(after, to)
    rendered = render(chain, to)
    try:
        script = scripts.generate_revision(
            rev_id or util.rev_id(), message, head=head or "base", refresh=True,
            version_path=version_path, config=config,
            upgrades=rendered.upgrades, downgrades=rendered.downgrades, imports=rendered.imports,
        )
    except util.CommandError as exc:
        raise HostError(str(exc)) from None
    assert script is not None
    _verify(script, chain, to)
    return script


def _verify(script: Script, chain: list[Script], to: str) -> None:
    """The host's template kept the marker and every part (a custom template may not)."""
    written = Path(script.path)
    text = written.read_text()
    if getattr(script.module, MARKER, None) != to or not all(heading(s) in text for s in chain):
        written.unlink()
        raise HostError(
            "your script.py.mako does not render ${imports}, ${upgrades} and ${downgrades} "
            "(as `alembic init` makes it): nothing was written"
        )
