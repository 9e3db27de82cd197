"""The server's guard: who may ask, from where, and what every response says about itself.

It is a server on the user's machine showing text an agent or a repository
wrote, so every request passes here first (a plain ASGI middleware):

- **Host**: the ``Host`` header must name this server as a browser reaches it: an
  IP address, ``localhost``, or the name it was started on. A page of another
  site whose name was made to resolve to this machine (DNS rebinding) sends its
  own name, and is refused. The port is not checked: an SSH tunnel may map
  another one.
- **Token**: a random token, printed in the URL at start as Jupyter does. The
  first request that carries it (``?token=``) gets it as a cookie (HttpOnly,
  SameSite=Strict) and is redirected to the same address without it; any
  request without the cookie (or the token) is refused.
- **Actions** (any method but GET and HEAD) must come from a page of this server:
  an ``Origin`` header naming it, and the CSRF token the pages carry (a form field
  or the ``X-CSRF-Token`` header, checked by ``check_csrf``). With
  ``--read-only`` they are refused outright.
- **Every response** forbids inline script and anything from elsewhere
  (Content-Security-Policy), framing, sniffing, referrers and caching.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
_OURS = frozenset(name for name, _ in HEADERS)
_SAFE_METHODS = frozenset({"GET", "HEAD"})
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


def new_token() -> str:
    """A random token of 256 bits, URL-safe."""
    return secrets.token_urlsafe(32)


@dataclass
class Guard:
    """What the guard checks against: the token, the names this server answers to, and
    whether actions are refused (``--read-only``)."""

    token: str
    port: int
    names: frozenset[str] = field(default_factory=frozenset)
    read_only: bool = False

    @property
    def cookie(self) -> str:
        # Cookies are shared by every port of a host: each server has a name of its own.
        return f"shep_ui_{self.port}"

    @property
    def csrf(self) -> str:
        """The CSRF token the pages carry: derived from the secret token, never it."""
        return hmac.new(self.token.encode(), b"shep-ui-csrf", hashlib.sha256).hexdigest()

    def host_allowed(self, host: str) -> bool:
        """Whether a ``Host`` header names this server (an IP, localhost, or its names)."""
        name = _hostname(host)
        if name is None:
            return False
        if name == "localhost" or name in self.names:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def token_ok(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.token.encode())

    def csrf_ok(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.csrf.encode())


def _hostname(host: str) -> str | None:
    """The name of a ``Host`` header without its port (an IPv6 address without brackets)."""
    try:
        parts = urlsplit(f"//{host}")
        name = parts.hostname
        _ = parts.port  # a port that is not a number is a bad header
    except ValueError:
        return None
    return name.lower() if name else None


def origin_matches(origin: str | None, host: str) -> bool:
    """Whether ``Origin`` is this server as the request's (checked) ``Host`` names it."""
    if not origin or origin == "null":
        return False
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _cookies(scope: Scope) -> dict[str, str]:
    raw = _header(scope, b"cookie")
    if not raw:
        return {}
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:  # a malformed cookie header is no cookie at all
        return {}
    return {key: morsel.value for key, morsel in jar.items()}


async def _refuse(
    send: Send, status: int, text: str, extra: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *HEADERS,
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class GuardMiddleware:
    """The checks of the module docstring, around the whole application."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        guard = self.guard
        host = _header(scope, b"host") or ""
        if not guard.host_allowed(host):
            await _refuse(send, 421, "shep ui: this server does not answer to that host name.\n")
            return
        query = dict(parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1")))
        given = query.get("token")
        if given is not None and scope["method"] in _SAFE_METHODS and guard.token_ok(given):
            # Into the cookie, and out of the address bar, the history and any referrer.
            rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
            path = bytes(scope.get("raw_path") or scope.get("path", "/").encode()).decode("latin-1")
            location = path + (f"?{rest}" if rest else "")
            cookie = f"{guard.cookie}={guard.token}; HttpOnly; SameSite=Strict; Path=/"
            await _refuse(
                send,
                303,
                "",
                [(b"location", location.encode()), (b"set-cookie", cookie.encode())],
            )
            return
        if not guard.token_ok(_cookies(scope).get(guard.cookie)):
            await _refuse(
                send,
                403,
                "shep ui: open the address `shep ui` printed (it carries the token).\n",
            )
            return
        if scope["method"] not in _SAFE_METHODS:
            if guard.read_only:
                await _refuse(send, 403, "shep ui: this server is read-only (--read-only).\n")
                return
            if not origin_matches(_header(scope, b"origin"), host):
                await _refuse(send, 403, "shep ui: an action must come from this server's page.\n")
                return
        scope.setdefault("state", {})["guard"] = guard

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k not in dict(HEADERS)]
                if not any(k == b"cache-control" for k, _ in headers):
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = [*headers, *HEADERS]
            await send(message)

        await self.app(scope, receive, secured)


def check_csrf(guard: Guard, form_value: str | None, header_value: str | None) -> bool:
    """Whether an action carries this server's CSRF token (form field or header)."""
    return guard.csrf_ok(form_value) or guard.csrf_ok(header_value)
