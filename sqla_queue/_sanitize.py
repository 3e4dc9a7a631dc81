"""Compact, bounded, secret-free error text for `last_error`, `last_traceback` and logs.

Exceptions are summarised as ``Type: first line of the message``. Database errors lose their
bound parameters and DETAIL lines (PostgreSQL echoes key values there). Anything that looks like
a credential is masked, control characters (NUL included, which PostgreSQL text rejects) are
dropped, and the result is cut to `MAX_ERROR_LENGTH` so the outcome update itself cannot fail.

`traceback_text` adds where the error happened: file, line, function and source line of each
frame, never local variables, and no exception message beyond the one-line summary above (a
chained cause shows its type only: its message may quote the payload).
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable
from types import CodeType, TracebackType
from typing import Any, TypeVar

MAX_ERROR_LENGTH = 500
MAX_TRACEBACK_LENGTH = 4000
"""The most characters `traceback_text` returns; the innermost frames are the ones kept."""

_MAX_SOURCE_LINE = 200
_MAX_FRAMES = 200  # frames read per exception: a deep recursion is cut before it is formatted
_MAX_CHAIN = 5
_MASK_WINDOW = 4
"""Text is cut to this many times its limit *before* it is masked: the patterns then cost the
same for a 100 MB message as for a 2 KB one, and the worker never stalls on a handler's error."""

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# The look-behind keeps the scheme from being tried at every letter of a long word (quadratic).
_URL_CREDENTIALS = re.compile(r"(?<![\w+.-])(?P<scheme>[a-zA-Z][\w+.-]*://)[^/\s:@]*:\S*@")
# (the password part runs to the *last* @ before a space: an unescaped @ in it is not the end)
# A secret-looking key (alone or inside a longer name: access_token, client_secret,
# aws_secret_access_key; quoted, as in JSON) followed by = or :, or by a quoted value after a
# space (SQL's PASSWORD 'x'), and its value.
_KEY_VALUE_SECRET = re.compile(
    r"(?i)(?P<key>\b(?:[\w-]{0,40}[_-])?(?:password|passwd|pwd|secret|token|api[_-]?key|authorization|auth)"
    r"(?:[_-][\w-]{0,40})?[\"']?)"
    r"(?P<sep>\s*[=:]\s*|\s+(?=[\"']))(?P<value>\"[^\"]*\"|'[^']*'|\S+)"
)
_BEARER = re.compile(r"(?i)\bbearer\s+[\w.~+/=-]+")


def error_text(error: BaseException | str, limit: int = MAX_ERROR_LENGTH) -> str:
    """A one-line summary of `error` that is safe to store and to log."""
    text = error if isinstance(error, str) else _describe(error)
    return clean_text(text, limit)


def clean_text(text: str, limit: int = MAX_ERROR_LENGTH) -> str:
    text = _mask(_CONTROL.sub(" ", _head(text, limit).replace("\r\n", "\n")).strip())
    text = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return _cut(text, limit) or "error"


def traceback_text(error: BaseException | str, limit: int = MAX_TRACEBACK_LENGTH) -> str | None:
    """Where `error` was raised, as text safe to store and to log, at most `limit` characters.

    Python's own layout (chained causes first, the error's one-line summary last), every line
    cleaned like `clean_text`. When it is too long, the oldest lines go first, so the frames
    nearest the failure are kept. None for a string, or an exception that was never raised.
    """
    if isinstance(error, str):
        return None
    chain = _chain(error)
    if all(exc.__traceback__ is None for exc in chain):
        return None
    entries: list[str] = []
    for exc in chain:
        if entries:
            entries.append(_link(exc))
        entries.extend(_frames(exc.__traceback__))
        entries.append(error_text(exc) if exc is error else f"{type(exc).__name__} (message not stored)")
    return _keep_innermost(entries, limit)


def _mask(text: str) -> str:
    text = _URL_CREDENTIALS.sub(r"\g<scheme>***@", text)
    # Bearer first: "Authorization: Bearer <token>" would otherwise mask only the word Bearer.
    text = _BEARER.sub("Bearer ***", text)
    return _KEY_VALUE_SECRET.sub(r"\g<key>\g<sep>***", text)


def _head(text: str, limit: int) -> str:
    """The part of `text` worth masking: what `limit` keeps, with room for masks to shrink it."""
    return text[: limit * _MASK_WINDOW + 64]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _line(text: str, limit: int = _MAX_SOURCE_LINE) -> str:
    """One line of a traceback: no control characters or line breaks, secrets masked."""
    return _cut(_mask(_CONTROL.sub(" ", _head(text, limit).replace("\n", " ")).strip()), limit)


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and what it was raised from or during, oldest first, as Python prints them."""
    chain = [error]
    while len(chain) < _MAX_CHAIN:
        current = chain[0]
        cause = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
        if cause is None or any(cause is seen for seen in chain):
            break
        chain.insert(0, cause)
    return chain


def _link(exc: BaseException) -> str:
    """The line Python prints between two chained exceptions; `exc` is the later one."""
    if exc.__cause__ is not None:
        return "\nThe above exception was the direct cause of the following exception:\n"
    return "\nDuring handling of the above exception, another exception occurred:\n"


def _frames(tb: TracebackType | None) -> list[str]:
    if tb is None:
        return []
    total = sum(1 for _ in traceback.walk_tb(tb))
    summary = traceback.extract_tb(tb, limit=-_MAX_FRAMES)  # the innermost ones; no locals
    entries = ["Traceback (most recent call last):"]
    if total > len(summary):
        entries.append(f"  … {total - len(summary)} outer frame(s) not read")
    for frame in summary:
        entry = f'  File "{_line(frame.filename)}", line {frame.lineno}, in {_line(frame.name)}'
        if frame.line:
            entry += f"\n    {_line(frame.line)}"
        entries.append(entry)
    return entries


def _keep_innermost(entries: list[str], limit: int) -> str:
    """Join `entries`, dropping the oldest ones first until the text fits in `limit`."""
    kept: list[str] = []
    size = 0
    for entry in reversed(entries):
        if kept and size + len(entry) + 1 > limit - 80:  # room for the note below
            kept.append(f"… {len(entries) - len(kept)} earlier entries omitted (cut to {limit} characters)")
            break
        kept.append(entry)
        size += len(entry) + 1
    return _cut("\n".join(reversed(kept)), limit)


def _describe(error: BaseException) -> str:
    name = type(error).__name__
    original = getattr(error, "orig", None)
    if isinstance(original, BaseException):
        # A SQLAlchemy DBAPIError: its str() carries the SQL and the parameters. Keep only the
        # driver error's class and primary message.
        name = f"{name}({type(original).__name__})"
        message = _primary_message(original)
    else:
        message = str(error)
    first_line = message.strip().splitlines()[0] if message.strip() else ""
    return f"{name}: {first_line}" if first_line else name


def _primary_message(error: BaseException) -> str:
    diag = getattr(error, "diag", None)
    primary = getattr(diag, "message_primary", None)
    return primary if primary else str(error).split("\n", 1)[0]


# -- where a handler's traceback starts ---------------------------------------------------

F = TypeVar("F", bound=Callable[..., Any])
_HANDLER_CALLERS: set[CodeType] = set()


def calls_handlers(function: F) -> F:
    """Mark `function` as one of the library's steps between a runner and a handler (the run
    loop, the middleware chain): `from_the_handler_on` drops its frames."""
    _HANDLER_CALLERS.add(function.__code__)
    return function


def from_the_handler_on(error: BaseException) -> BaseException:
    """`error` without the library's own frames at the top of its traceback: the stored and
    logged traceback then starts in the user's handler (or middleware), where the failure is."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code in _HANDLER_CALLERS and tb.tb_next is not None:
        tb = tb.tb_next
    return error if tb is error.__traceback__ else error.with_traceback(tb)
