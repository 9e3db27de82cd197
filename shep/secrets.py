"""Agent tokens, kept apart from the event log in ``$SHEP_HOME/secrets`` (mode 0600).

Tokens reach an agent only through its environment variable. They are never
put in an event, a log line, argv or ``--json`` output.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from events.errors import ShepError

SECRETS_FILE = "secrets"


class SecretsError(ShepError):
    """The secrets file cannot be read or written."""


def secrets_path(home: Path) -> Path:
    return home / SECRETS_FILE


def _read(home: Path) -> dict[str, str]:
    path = secrets_path(home)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise SecretsError(f"Cannot read {path} ({e.strerror}).") from e
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise SecretsError(
            f"{path} is not valid JSON. Configure the token again with `shep settings agent`."
        ) from e
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise SecretsError(f"{path} has an unexpected shape. Configure the token again.")
    return data


def load_token(home: Path, agent_type: str) -> str | None:
    """The stored token for an agent type, if any."""
    return _read(home).get(agent_type)


def save_token(home: Path, agent_type: str, token: str | None) -> None:
    """Store (or with None, remove) an agent's token; the file is replaced atomically, 0600."""
    data = _read(home)
    if token is None:
        data.pop(agent_type, None)
    else:
        data[agent_type] = token
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".secrets-", dir=home)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, secrets_path(home))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
