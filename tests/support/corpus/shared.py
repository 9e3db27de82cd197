"""An entry's shared-store copy: its store moved into PostgreSQL (``shep store migrate``),
kept as ``shared.sql.gz`` (``pg_dump``, plain SQL), restored on a throwaway server.

Made only where PostgreSQL's binaries are (Debian's, see tests/support/postgres_server.py).
"""

from __future__ import annotations

import contextlib
import gzip
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.support.corpus.entry import Entry, shep
from tests.support.postgres_server import PostgresServer, find_binaries

SHARED = "shared.sql.gz"


@contextlib.contextmanager
def server() -> Iterator[PostgresServer | None]:
    """A throwaway server, or None where PostgreSQL is not installed."""
    binaries = find_binaries()
    if binaries is None:
        yield None
        return
    running = PostgresServer(binaries).start()
    try:
        yield running
    finally:
        running.stop()


def _tool(pg: PostgresServer, name: str) -> str:
    """``pg_dump`` or ``psql`` beside the server's binaries, else Debian's, else on PATH."""
    import glob
    import shutil

    beside = pg.binaries / name
    if beside.exists():
        return str(beside)
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name) or name


def dump(env: Mapping[str, str], pg: PostgresServer, target: Path) -> str:
    """The world's store (``env``'s home) moved into a new database of ``pg`` and dumped to
    ``target`` (gzipped, no name or time); the database's URL."""
    url = pg.database()
    shep(env, "store", "migrate", "--to", url)
    sql = subprocess.run(
        [_tool(pg, "pg_dump"), "--no-owner", "--no-privileges", "-d", url],
        capture_output=True,
        check=True,
    ).stdout
    target.write_bytes(gzip.compress(sql, compresslevel=9, mtime=0))
    return url


def restore(entry: Entry, pg: PostgresServer) -> str:
    """The entry's shared-store copy loaded into a new database of ``pg``; its URL."""
    url = pg.database()
    subprocess.run(
        [_tool(pg, "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-d", url],
        input=gzip.decompress((entry.path / SHARED).read_bytes()),
        capture_output=True,
        check=True,
    )
    return url
