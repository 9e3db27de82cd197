"""Who and where: the actor recorded on events, and this host."""

from __future__ import annotations

import getpass
import os
import socket


def host_name() -> str:
    return socket.gethostname()


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
