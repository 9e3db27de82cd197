"""PostgreSQL URLs as shep shows them: never with a password (no eventsourcing, no psycopg)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from events.errors import StoreError

_PASSWORD_PARAM = re.compile(r"(?i)([?&]password=)[^&]*")


def is_postgres_url(value: str) -> bool:
    return value.startswith(("postgresql://", "postgres://"))


def has_password(url: str) -> bool:
    """Whether the URL itself carries a password (user:password@ or ?password=)."""
    try:
        parts = urlsplit(url)
        return bool(parts.password) or bool(_PASSWORD_PARAM.search(url))
    except ValueError:
        return False


def redacted(url: str) -> str:
    """The URL with any password replaced by ``***``: safe for stderr, logs and ``--json``."""
    try:
        parts = urlsplit(url)
        if parts.password is not None:  # rebuilt only then: urlunsplit drops an empty "//"
            user, _, host = parts.netloc.rpartition("@")
            netloc = f"{user.split(':', 1)[0]}:***@{host}"
            url = urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "postgresql://(unreadable URL)"
    return _PASSWORD_PARAM.sub(r"\1***", url)


def where(url: str) -> str:
    """``host:port/dbname`` of the URL: how messages name the server."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "the PostgreSQL server"
    return f"{host}{port}{parts.path or '/'}"


def store_error(error: BaseException, url: str) -> StoreError:
    """The shep error a user can act on, for a PostgreSQL store's error (by the driver's name).

    Reads the cause chain by class name, so callers need not import psycopg.
    """
    from events.errors import StoreError, StoreUnavailableError

    cause: BaseException = error
    while cause.__cause__ is not None and not type(cause).__module__.startswith("psycopg"):
        cause = cause.__cause__
    name = type(cause).__name__
    first_line = str(cause).strip().splitlines()[0] if str(cause).strip() else name
    server = where(url)
    # A server shut down or crashed (SQLSTATE 57P: CrashShutdown, AdminShutdown, ...) or a
    # lost connection (08) is the server going away, as a plain OperationalError is.
    sqlstate = str(getattr(cause, "sqlstate", "") or "")
    gone = sqlstate.startswith(("57P", "08"))
    if gone or name in ("OperationalError", "InterfaceError", "ConnectionTimeout", "PoolTimeout"):
        login = ("password authentication failed", "no password supplied", 'role "')
        if any(words in first_line for words in login):
            return StoreUnavailableError(
                f"The shared store at {server} refused the login ({first_line}). "
                "Check the user and password (PGPASSWORD or ~/.pgpass)."
            )
        if "does not exist" in first_line:
            return StoreUnavailableError(
                f"The shared store at {server} has no such database ({first_line}). "
                "Create it (createdb) or fix the URL: shep settings store --url URL."
            )
        return StoreUnavailableError(
            f"Cannot reach the shared store at {server} ({first_line}). "
            "Check that the server is up and reachable."
        )
    if name == "InsufficientPrivilege":
        return StoreUnavailableError(
            f"The shared store at {server} refused this user ({first_line}). "
            "Grant it CREATE, INSERT and SELECT on the database."
        )
    return StoreError(f"The shared store at {server} failed: {first_line}")
