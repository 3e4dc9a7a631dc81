"""Who may act, and proof that a POST came from the dashboard's own form.

* **Actions** are allowed only when the host's ``auth(request)`` callable returns True (it may be
  async); without one the dashboard is read-only. `basic_auth` builds such a callable from a
  password, for the CLI and for hosts without a login of their own.
* **CSRF**: a signed double-submit token. The browser holds a random nonce in a ``SameSite=Strict``
  cookie; every form carries ``nonce.signature`` (HMAC-SHA256 under the app's secret). A POST is
  accepted only when the form's nonce is the cookie's and the signature verifies, so another
  site can neither read nor forge the field.
* **Reads** may be guarded too: ``read_auth(request)`` (same shape as ``auth``) must return True
  for every page when given; `basic_auth` answers the browser's challenge.
* **Host** (DNS rebinding): with ``allowed_hosts``, a request whose ``Host`` header names
  another host is refused (400) before any page runs, so a page on ``evil.example`` resolving
  to 127.0.0.1 cannot read the loopback dashboard.
* **Headers** on every response: no framing (``X-Frame-Options: DENY``, CSP
  ``frame-ancestors 'none'``), no MIME sniffing, no referrer, and ``Cache-Control: no-store``
  (pages hold payloads).
* **Flash**: the one-line report of what an action changed, carried across the redirect in a
  cookie signed the same way (a forged cookie is ignored, never shown).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

Auth = Callable[[Request], bool | Awaitable[bool]]
CSRF_COOKIE = "sqlaq_csrf"
FLASH_COOKIE = "sqlaq_flash"
CSRF_FIELD = "csrf_token"


class Signer:
    """HMAC-SHA256 signatures under one secret (random per process unless the host gives one)."""

    def __init__(self, secret: str | bytes | None) -> None:
        if isinstance(secret, str):
            secret = secret.encode()
        self.secret = secret or secrets.token_bytes(32)

    def sign(self, value: str) -> str:
        digest = hmac.new(self.secret, value.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def signed(self, value: str) -> str:
        return f"{value}.{self.sign(value)}"

    def unsigned(self, token: str | None) -> str | None:
        """The value of a ``value.signature`` token, or None when the signature is wrong."""
        if not token or "." not in token:
            return None
        value, _, signature = token.rpartition(".")
        return value if hmac.compare_digest(self.sign(value), signature) else None


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def csrf_valid(signer: Signer, cookie: str | None, field: str | None) -> bool:
    """The form's token is signed by us and names the nonce in this browser's cookie."""
    nonce = signer.unsigned(field)
    return nonce is not None and cookie is not None and hmac.compare_digest(nonce, cookie)


def encode_flash(signer: Signer, message: str, kind: str) -> str:
    text = base64.urlsafe_b64encode(f"{kind}\n{message}".encode()).decode()
    return signer.signed(text)


def decode_flash(signer: Signer, cookie: str | None) -> tuple[str, str] | None:
    """(kind, message) from a flash cookie we signed; None for none or a forged one."""
    text = signer.unsigned(cookie)
    if text is None:
        return None
    try:
        kind, _, message = base64.urlsafe_b64decode(text.encode()).decode().partition("\n")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return kind, message


async def allowed(auth: Auth | None, request: Request) -> bool:
    """Whether `auth` lets this request act; no callable means nobody may."""
    if auth is None:
        return False
    verdict = auth(request)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return verdict is True


def basic_auth(password: str, *, username: str = "admin") -> Auth:
    """An `auth` callable accepting HTTP basic credentials `username`/`password`.

    The browser sends them after the dashboard's "sign in" link answers 401 with a challenge;
    compared in constant time.
    """
    if not password:
        raise ValueError("basic_auth needs a non-empty password")
    expected = f"{username}:{password}".encode()

    def check(request: Request) -> bool:
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, expected)

    check.challenges = True  # type: ignore[attr-defined]  # the sign-in link may answer 401
    return check


SECURITY_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


class Guard:
    """ASGI middleware in front of every route: the Host allow-list, the read guard, and the
    security headers on whatever answers (pages, actions, static files, errors)."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: tuple[str, ...] | None, read_auth: Auth | None) -> None:
        self.app = app
        self.allowed_hosts = None if allowed_hosts is None else {host.lower().strip("[]") for host in allowed_hosts}
        self.read_auth = read_auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        request = Request(scope)
        refusal = await self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, with_headers)
            return
        await self.app(scope, receive, with_headers)

    async def _refusal(self, request: Request) -> Response | None:
        if self.allowed_hosts is not None and host_of(request.headers.get("host", "")) not in self.allowed_hosts:
            return Response("unknown host: the dashboard answers only the hosts it was given", status_code=400)
        if self.read_auth is not None and not await allowed(self.read_auth, request):
            challenges = getattr(self.read_auth, "challenges", False)
            headers = {"WWW-Authenticate": 'Basic realm="sqla_queue dashboard"'} if challenges else {}
            return Response("sign-in required", status_code=401, headers=headers)
        return None


def host_of(header: str) -> str:
    """The host of a ``Host`` header, without its port, lower case (``[::1]:8080`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header
