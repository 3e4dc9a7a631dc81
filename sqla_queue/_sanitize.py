"""Compact, bounded, secret-free error text for `last_error` and logs.

Exceptions are summarised as ``Type: first line of the message``. Database errors lose their
bound parameters and DETAIL lines (PostgreSQL echoes key values there). Anything that looks like
a credential is masked, control characters (NUL included, which PostgreSQL text rejects) are
dropped, and the result is cut to `MAX_ERROR_LENGTH` so the outcome update itself cannot fail.
"""

from __future__ import annotations

import re

MAX_ERROR_LENGTH = 500

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)[^/\s:@]*:[^@\s]*@")
_KEY_VALUE_SECRET = re.compile(
    r"(?i)\b(?P<key>password|passwd|pwd|secret|token|api[_-]?key|authorization|auth)"
    r"(?P<sep>\s*[=:]\s*)(?P<value>\"[^\"]*\"|'[^']*'|\S+)"
)
_BEARER = re.compile(r"(?i)\bbearer\s+[\w.~+/=-]+")


def error_text(error: BaseException | str, limit: int = MAX_ERROR_LENGTH) -> str:
    """A one-line summary of `error` that is safe to store and to log."""
    text = error if isinstance(error, str) else _describe(error)
    return clean_text(text, limit)


def clean_text(text: str, limit: int = MAX_ERROR_LENGTH) -> str:
    text = _CONTROL.sub(" ", text.replace("\r\n", "\n")).strip()
    text = _URL_CREDENTIALS.sub(r"\g<scheme>***@", text)
    # Bearer first: "Authorization: Bearer <token>" would otherwise mask only the word Bearer.
    text = _BEARER.sub("Bearer ***", text)
    text = _KEY_VALUE_SECRET.sub(r"\g<key>\g<sep>***", text)
    text = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text or "error"


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
