"""Who and where: the actor recorded on events, and this host."""

from __future__ import annotations

import getpass
import os
import socket


def host_name() -> str:
    """This machine's name as runs record it (``SHEP_HOST`` overrides: two homes, two "hosts")."""
    return os.environ.get("SHEP_HOST") or socket.gethostname()


def user_actor(as_: str | None = None) -> str:
    """``user:<login>`` of the person deciding (``--as NAME`` gives ``user:NAME``).

    A value that already names its kind (``ci:...``) is kept; shep's own deciders
    (``supervisor:...``, ``system:...``) cannot be claimed by a person.
    """
    as_ = as_.strip() if as_ else as_
    if as_ and as_.split(":", 1)[0].strip().casefold() in ("supervisor", "system"):
        from events.errors import InvalidAnswerError

        raise InvalidAnswerError(
            f"--as {as_!r}: the supervisor and the system decide only through shep itself."
        )
    if as_:
        return as_ if ":" in as_ else f"user:{as_}"
    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        login = str(os.getuid())
    return f"user:{login}"


def current_actor() -> str:
    """``user@host`` of the person running shep (``SHEP_ACTOR`` overrides, for automation)."""
    override = os.environ.get("SHEP_ACTOR")
    if override:
        return override
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{host_name()}"
