"""A throwaway PostgreSQL server for tests and benchmarks: Debian's binaries, a temp cluster.

``PostgresServer(find_binaries()).start()`` runs ``initdb`` in a temporary
directory and starts ``postgres`` on a free loopback port (trust auth, no
password); ``database()`` creates a fresh database and gives its URL;
``kill()`` SIGKILLs the server (a lost connection, as a crash or a network cut
looks to a client) and ``revive()`` starts it again on the same port and data.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

#: Set by CI: a missing PostgreSQL fails the tests that need one instead of skipping them.
REQUIRE_ENV = "SHEP_REQUIRE_POSTGRES"


def find_binaries() -> Path | None:
    """The directory holding ``initdb`` and ``postgres`` (Debian keeps them off PATH)."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(on_path).parent
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One cluster, owned by this process; ``stop()`` removes it."""

    def __init__(self, binaries: Path, *, settings: tuple[str, ...] = ()) -> None:
        self.binaries = binaries
        self.settings = settings
        self.dir = Path(tempfile.mkdtemp(prefix="shep-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.user = "shep"
        self._process: subprocess.Popen[bytes] | None = None
        self._as_root = os.geteuid() == 0

    def _run_as(self) -> dict[str, object]:
        # PostgreSQL refuses to run as root: CI runs as root, so run it as nobody.
        if not self._as_root:
            return {}
        import pwd

        nobody = pwd.getpwnam("nobody")
        return {"user": nobody.pw_uid, "group": nobody.pw_gid}

    def start(self) -> PostgresServer:
        if self._as_root:
            import pwd

            nobody = pwd.getpwnam("nobody")
            os.chown(self.dir, nobody.pw_uid, nobody.pw_gid)
        subprocess.run(
            [
                str(self.binaries / "initdb"),
                "-D",
                str(self.data),
                "-U",
                self.user,
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
            **self._run_as(),  # type: ignore[arg-type]
        )
        self._launch()
        return self

    def _launch(self) -> None:
        args = [
            str(self.binaries / "postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.dir}",
            "-c",
            "max_connections=200",
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
        ]
        for setting in self.settings:
            args += ["-c", setting]
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - the server keeps it
        self._process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **self._run_as(),  # type: ignore[arg-type]
        )
        log.close()
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(
                    "postgres exited: " + (self.dir / "server.log").read_text(errors="replace")
                )
            try:
                import psycopg

                with psycopg.connect(self.url("postgres"), connect_timeout=2):
                    return
            except Exception:
                time.sleep(0.05)
        raise RuntimeError("postgres did not accept connections in time")

    def url(self, dbname: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def database(self, name: str | None = None) -> str:
        """A new, empty database on this server; its URL."""
        import psycopg

        name = name or "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def kill(self) -> None:
        """SIGKILL the server and its children: clients see their connections drop."""
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
        # The children (backends) die with the postmaster's group; remove the stale pid.
        (self.data / "postmaster.pid").unlink(missing_ok=True)

    def revive(self) -> None:
        """Start the killed server again, same port and data."""
        self._launch()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
