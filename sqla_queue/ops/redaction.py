"""What `doctor` shows of other sessions' SQL and of stored errors: one line, bounded, and for
SQL without its literals."""

from __future__ import annotations

import re

from .._sanitize import clean_text
from ..sql import catalog


def query_preview(text: str | None) -> str:
    """Another session's query, one line, with its literals replaced by ``?`` (as
    pg_stat_statements shows queries): a ``PASSWORD '...'``, a card number or an email in
    someone else's SQL never reaches the doctor's output; the statement's shape is enough to
    find the session."""
    one_line = " ".join((text or "")[: catalog.QUERY_PREVIEW * 4].split())
    if not one_line:
        return "-"
    return clean_text(_without_literals(one_line), catalog.QUERY_PREVIEW)


def one_line(text: str | None) -> str:
    """A stored error, one line (it was cleaned when it was stored)."""
    one_line = " ".join((text or "")[: catalog.QUERY_PREVIEW * 4].split())
    return clean_text(one_line, catalog.QUERY_PREVIEW) if one_line else "-"


_STRING_LITERAL = re.compile(r"(?:[EeBbXxNn]|[Uu]&)?'(?:[^']|'')*'?")
_DOLLAR_QUOTED = re.compile(r"\$(\w*)\$.*?(?:\$\1\$|$)")
_NUMBER = re.compile(r"(?<![\w$.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w])")


def _without_literals(sql: str) -> str:
    sql = _DOLLAR_QUOTED.sub("?", sql)
    sql = _STRING_LITERAL.sub("?", sql)
    return _NUMBER.sub("?", sql)
