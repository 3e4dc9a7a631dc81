"""Reading docs/tutorial.md's marked blocks, and typing its commands into real shells.

The tutorial marks each fenced block with a comment, invisible in rendered Markdown:

- ``<!-- tutorial: shell -->``: a ``console`` block typed into the main terminal; ``cd``,
  ``source`` and shell variables carry over from one command to the next, as they do for a user.
- ``<!-- tutorial: server -->``: a ``console`` block typed into a second terminal; its last
  command keeps running (the web server).
- ``<!-- tutorial: edit PATH -->``: a ``diff`` block the reader applies to PATH by hand. Hunks
  are separated by ``@@`` lines; each hunk's context and ``-`` lines must occur in the file
  exactly once and are replaced by its context and ``+`` lines.
- ``<!-- tutorial: excerpt PATH -->``: a code block quoting PATH (from the repository root)
  verbatim.

In a ``console`` block each ``$ `` line is a command and each line under it must match a whole
line of what it printed, where ``...`` matches any text.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

_BLOCK = re.compile(r"(?:<!-- tutorial: (\w+)(?: (\S+))? -->\n)?```(\w*)\n(.*?)```", re.S)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Command:
    line: str
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    kind: str  # shell, server, edit, excerpt
    target: str | None
    language: str
    body: str

    @property
    def commands(self) -> list[Command]:
        return parse_console(self.body)


def blocks(markdown: str) -> list[Block]:
    """Every fenced block in page order; an unmarked block has kind ``""``."""
    return [Block(kind or "", target, language, body) for kind, target, language, body in _BLOCK.findall(markdown)]


def parse_console(body: str) -> list[Command]:
    commands: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append(Command(line[2:]))
        elif line.strip():
            assert commands, f"output before any command: {line!r}"
            commands[-1].expected.append(line.strip())
    return commands


def missing_lines(expected: list[str], output: str) -> list[str]:
    """The expected lines (``...`` = any text) that match no whole line of `output`."""
    printed = [_ANSI.sub("", line).strip() for line in output.splitlines()]
    patterns = {line: re.compile(".*".join(map(re.escape, line.split("...")))) for line in expected}
    return [line for line, pattern in patterns.items() if not any(pattern.fullmatch(p) for p in printed)]


def apply_edit(path: Path, diff: str) -> None:
    """Apply a tutorial ``edit`` block to `path` (see the module docstring)."""
    text = path.read_text()
    for hunk in re.split(r"^@@.*\n", diff, flags=re.M):
        old, new = [], []
        for line in hunk.splitlines():
            sign, content = line[:1], line[1:]
            assert sign in (" ", "-", "+"), f"not a diff line: {line!r}"
            if sign in (" ", "-"):
                old.append(content)
            if sign in (" ", "+"):
                new.append(content)
        before, after = "\n".join(old) + "\n", "\n".join(new) + "\n"
        assert text.count(before) == 1, f"{path.name} does not contain exactly once:\n{before}"
        text = text.replace(before, after)
    path.write_text(text)


class Terminal:
    """A bash reading commands from a pipe, one at a time, like a user typing them."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], cwd=cwd, env=env, text=True, bufsize=1,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: close() ends it with every child
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.transcript: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def type(self, command: str) -> None:
        """Type a command and do not wait for it (a server)."""
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def run(self, command: str, timeout: float) -> tuple[int, str]:
        """Type a command, wait for it to finish: its exit status and everything it printed."""
        done = f"__tutorial_step_done_{uuid.uuid4().hex}"
        self.type(f"{command}\nprintf '\\n{done} %s\\n' \"$?\"")
        output: list[str] = []
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"`{command}` still running after {timeout} s:\n{''.join(output)}") from None
            if line is None:
                raise AssertionError(f"the shell exited during `{command}`:\n{''.join(output)}")
            if line.startswith(done):
                status = int(line.split()[1])
                text = "".join(output)
                self.transcript.append(f"$ {command}\n{text}")
                return status, text.removesuffix("\n")
            output.append(line)

    def printed_so_far(self) -> str:
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return "".join(self.transcript)
            if line is None:
                return "".join(self.transcript)
            self.transcript.append(line)

    def close(self) -> None:
        """End the shell and everything it started (our own process group only)."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process.stdin.close()
