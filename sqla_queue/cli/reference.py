"""docs/reference/cli.md, generated from the click commands themselves: every command's and
subcommand's ``--help``, exactly as the terminal shows it at 80 columns.

``python -m sqla_queue.cli.reference > docs/reference/cli.md`` regenerates the page; a test
fails when the page and the commands disagree, so a new option cannot ship undocumented.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from .root import main

WIDTH = 80
"""click's own cap on help text width: what ``--help`` prints on any terminal this wide or wider."""

INTRO = """# Command-line reference

Every `sqla-queue` command and its options, as `sqla-queue COMMAND --help` prints them. This
page is generated from the commands (`python -m sqla_queue.cli.reference > docs/reference/cli.md`)
and checked against them by the test suite. How to use them: the how-to guides linked from
[the documentation index](../index.md).
"""


def help_texts() -> Iterator[tuple[str, str]]:
    """``(command path, its --help text)`` for the group and every command below it, in order."""
    root = click.Context(main, info_name="sqla-queue", terminal_width=WIDTH, **main.context_settings)
    yield from _walk(main, root)


def _walk(command: click.Command, ctx: click.Context) -> Iterator[tuple[str, str]]:
    yield ctx.command_path, command.get_help(ctx)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            child = command.get_command(ctx, name)
            if child is not None and not child.hidden:
                yield from _walk(child, click.Context(child, info_name=name, parent=ctx, terminal_width=WIDTH,
                                                       **child.context_settings))


def render() -> str:
    sections = [INTRO]
    for path, text in help_texts():
        sections.append(f"## `{path}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(sections)


if __name__ == "__main__":
    print(render(), end="")
