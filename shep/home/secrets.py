"""Agent tokens, kept apart from the event log in ``$SHEP_HOME/secrets`` (mode 0600).

Tokens reach an agent only through its environment variable. They are never
put in an event, a log line, argv or ``--json`` output.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from events.errors import SecretsError, SettingsError

if TYPE_CHECKING:
    from pathlib import Path

# Every command reads which store its home is on (``configured_store_url``) before any
# query: json, tempfile, fcntl and pathlib are imported only where a file is read or
# written, so a home without a store file pays for none of them.

SECRETS_FILE = "secrets"
#: Held (flock, exclusive) by whoever reads, changes and replaces the secrets file.
LOCK_FILE = "secrets.lock"


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
    import json

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


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Hold the exclusive lock on the secrets file of ``home`` (released on close, or exit)."""
    path = home / LOCK_FILE
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise SecretsError(
            f"Cannot open {path} ({e.strerror}). Check that {home} is writable."
        ) from e
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def save_token(home: Path, agent_type: str, token: str | None) -> None:
    """Store (or with None, remove) an agent's token; the file is replaced atomically, 0600.

    The read, change and replace happen under an exclusive lock: two processes
    storing tokens for two agents at once would otherwise both start from the
    old file, and the second replace would drop the first one's token.
    """
    with _locked(home):
        try:
            data = _read(home)
        except SecretsError:
            if not secrets_path(home).is_file():
                raise
            # Damaged beyond reading: keep it aside (0600, as it was) and start anew,
            # as the error that sent the user here promised.
            os.replace(secrets_path(home), secrets_path(home).with_name("secrets.damaged"))
            data = {}
        if token is None:
            data.pop(agent_type, None)
        else:
            data[agent_type] = token
        _replace(home, data)


def _replace(home: Path, data: dict[str, str], *, name: str = SECRETS_FILE) -> None:
    """Write ``data`` to a new 0600 file and rename it over the secrets file (or ``name``)."""
    import json
    import tempfile

    path = home / name
    try:
        fd, tmp = tempfile.mkstemp(prefix=".secrets-", dir=home)
    except OSError as e:
        raise _write_error(path, e) from e
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _write_error(path, e) from e
        raise


def _write_error(path: Path, e: OSError) -> SecretsError:
    return SecretsError(
        f"Cannot write {path} ({e.strerror}). Check that {path.parent} is writable."
    )


#: The shared store's URL, in a 0600 file of its own beside the tokens: it may hold a
#: password, and a damaged secrets file must not hide where the log is.
STORE_FILE = "store"
STORE_URL_ENV = "SHEP_DATABASE_URL"


def load_store_url(home: str | os.PathLike[str]) -> str | None:
    """The shared store this home was pointed at with ``shep settings store``, if any."""
    path = os.path.join(home, STORE_FILE)
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except (FileNotFoundError, NotADirectoryError):
        return None  # no such home yet: whoever creates it says why it cannot
    except OSError as e:
        raise SecretsError(f"Cannot read {path} ({e.strerror}).") from e
    import json

    try:
        data = json.loads(raw)
        url = data["url"]
        if not isinstance(url, str):
            raise TypeError(url)
    except (ValueError, KeyError, TypeError) as e:
        raise SecretsError(
            f"{path} is damaged. Point this home at its store again: shep settings store --url URL"
        ) from e
    return url


def save_store_url(home: Path, url: str | None) -> None:
    """Point this home at a shared store (None: back to its own SQLite file)."""
    with _locked(home):
        if url is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(home / STORE_FILE)
            return
        _replace(home, {"url": url}, name=STORE_FILE)


def configured_store_url(home: str | os.PathLike[str]) -> str | None:
    """``$SHEP_DATABASE_URL``, else the URL saved for this home, else None (SQLite)."""
    url = os.environ.get(STORE_URL_ENV)
    if not url:
        return load_store_url(home)
    from events.postgres_url import is_postgres_url, redacted

    if not is_postgres_url(url):
        raise SettingsError(
            f"{STORE_URL_ENV} is not a PostgreSQL URL: {redacted(url)} (postgresql://...). "
            f"Unset it to keep the log in this home's SQLite file."
        )
    return url


def require_token(home: Path, agent_type: str, *, configured: bool) -> None:
    """Fail before a run starts when the agent uses a token this home does not hold.

    On a shared store the agent settings reach every machine through the log,
    but tokens stay on the machine that stored them.
    """
    if load_token(home, agent_type) is None and configured:
        raise SecretsError(
            f"The {agent_type} agent is set up with an API token, but this machine has none "
            f"in {secrets_path(home)} (tokens stay on the machine that stored them). "
            f"Store it here: shep settings agent --agent {agent_type} --auth token --token-stdin"
        )
