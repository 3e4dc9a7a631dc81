"""last_error text: one compact line, secrets masked, control characters dropped, bounded."""

from __future__ import annotations

import pytest
from sqlalchemy import exc as sa_exc

from sqla_queue._sanitize import MAX_ERROR_LENGTH, clean_text, error_text


@pytest.mark.parametrize(
    ("raw", "secret"),
    [
        ("connect to postgresql://app:s3cr3t@db.internal:5432/prod failed", "s3cr3t"),
        ("redis://:hunter2@cache:6379/0 refused", "hunter2"),
        ("login with password=hunter2 failed", "hunter2"),
        ("PASSWORD: 'two words'", "two words"),
        ('api_key="abc123xyz" rejected', "abc123xyz"),
        ("api-key=abc123xyz rejected", "abc123xyz"),
        ("token=eyJhbGciOi.payload.sig expired", "eyJhbGciOi"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "eyJhbGciOiJIUzI1NiJ9"),
        ("secret = topsecretvalue", "topsecretvalue"),
        ("pwd=p4ss;", "p4ss"),
        # D8 of the adversarial review: longer key names, JSON, SQL, an unescaped @
        ("access_token=ya29.a0AfH6 expired", "ya29.a0AfH6"),
        ("client_secret=GOCSPX-abc rejected", "GOCSPX-abc"),
        ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG refused", "wJalrXUtnFEMI"),
        ('body {"user": "ann", "password": "hunter2"} rejected', "hunter2"),
        ("ALTER ROLE app WITH LOGIN PASSWORD 'hunter2' failed", "hunter2"),
        ("connect to postgresql://app:p@ss@db.internal/prod failed", "ss"),
    ],
)
def test_secrets_are_masked(raw, secret):
    text = clean_text(raw)
    assert secret not in text
    assert "***" in text


def test_words_that_only_look_like_keys_are_left_alone():
    assert clean_text("author: Jane, tokenizer failed") == "author: Jane, tokenizer failed"


def test_url_keeps_its_host_and_scheme_once_masked():
    text = clean_text("postgresql://app:s3cr3t@db.internal/prod")
    assert text == "postgresql://***@db.internal/prod"


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x1b", "\x1f", "\x7f"])
def test_control_characters_are_dropped(char):
    text = clean_text(f"bad{char}byte")
    assert char not in text
    assert text == "bad byte"


def test_lines_are_joined_into_one():
    assert clean_text("first\n\n  second  \r\nthird") == "first | second | third"


def test_length_is_bounded_with_an_ellipsis():
    text = clean_text("x" * 10_000)
    assert len(text) == MAX_ERROR_LENGTH == 500
    assert text.endswith("…")


def test_custom_limit():
    assert len(clean_text("y" * 100, limit=20)) == 20


def test_empty_text_becomes_a_placeholder():
    assert clean_text("") == "error"
    assert clean_text("\x00\x00 \n") == "error"


def test_exception_is_summarised_as_type_and_first_line():
    error = ValueError("bad address\nTraceback detail that should not be stored")
    assert error_text(error) == "ValueError: bad address"


def test_exception_without_message_is_its_type():
    assert error_text(KeyError()) == "KeyError"


def test_hostile_exception_message_is_bounded_clean_and_secret_free():
    message = "password=hunter2 postgresql://u:pw123@h/db " + "\x00boom" * 3_000
    text = error_text(RuntimeError(message))
    assert len(text) <= MAX_ERROR_LENGTH
    assert "\x00" not in text
    assert "hunter2" not in text and "pw123" not in text
    assert text.startswith("RuntimeError: password=***")


class _Diag:
    message_primary = 'new row violates check constraint "no_card_numbers"'


class _DriverError(Exception):
    diag = _Diag()


def test_database_error_keeps_only_the_driver_class_and_primary_message():
    driver = _DriverError(
        'new row violates check constraint "no_card_numbers"\n'
        "DETAIL:  Failing row contains (1, {\"card\": \"4111\"})"
    )
    wrapped = sa_exc.IntegrityError("INSERT INTO jobs ...", {"card": "4111"}, driver)

    text = error_text(wrapped)

    assert text == 'IntegrityError(_DriverError): new row violates check constraint "no_card_numbers"'
    assert "4111" not in text and "INSERT" not in text


def test_string_errors_are_cleaned_not_summarised():
    assert error_text("line one\nline two") == "line one | line two"


@pytest.mark.parametrize("size", [10_000, 1_000_000])
def test_only_a_bounded_head_of_a_huge_message_is_masked(monkeypatch, size):
    """The masking patterns run on what the limit keeps (with room), never on the whole message:
    a handler raising a multi-megabyte error costs the worker no more than a short one."""
    import sqla_queue._sanitize as sanitize

    seen: list[int] = []
    original = sanitize._mask
    monkeypatch.setattr(sanitize, "_mask", lambda text: seen.append(len(text)) or original(text))
    summary = error_text(RuntimeError("x" * size + " postgresql://app:s3cr3t@db/prod"))
    assert len(summary) <= MAX_ERROR_LENGTH and "s3cr3t" not in summary
    assert seen and max(seen) <= MAX_ERROR_LENGTH * 4 + 64


def test_a_secret_at_the_end_of_a_cut_message_is_masked_or_gone():
    for padding in range(1900, 2100, 7):  # around the head's edge
        text = clean_text("y" * padding + " password=hunter2 postgresql://u:hunter2@h/db")
        assert "hunter2" not in text
