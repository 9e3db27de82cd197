"""A real `shep ui` process for tests, and a plain HTTP client that can lie about its Host.

``UiServer.start(env)`` runs ``python -m shep ui --no-open --port 0`` with the given
environment and reads the address it prints; ``stop()`` sends SIGTERM, as a user's
Ctrl-C would. ``request`` uses ``http.client`` so a test sets exactly the headers a
browser (or an attacker's page) would send: Host, Origin, Cookie.
"""

from __future__ import annotations

import http.client
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_URL = re.compile(r"at (http://\S+/\?token=(\S+))")


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str
    cookies: list[str] = field(default_factory=list)


@dataclass
class UiServer:
    proc: subprocess.Popen[str]
    url: str
    token: str
    host: str
    port: int
    first_lines: list[str]

    @classmethod
    def start(
        cls, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
    ) -> UiServer:
        """Start `shep ui ARGS` and wait for the address it prints."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "shep", "ui", "--no-open", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **(env or {})},
        )
        assert proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        lines: list[str] = []
        while time.monotonic() < deadline:
            if not selector.select(timeout=0.2):
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = _URL.search(line)
            if match:
                parts = urlsplit(match[1])
                assert parts.hostname is not None
                assert parts.port is not None
                return cls(proc, match[1], match[2], parts.hostname, parts.port, lines)
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"shep ui did not start: {''.join(lines)} {err}")

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def cookie(self) -> str:
        return f"shep_ui_{self.port}={self.token}"

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: str | None = None,
        cookie: bool = True,
        timeout: float = 30,
    ) -> Reply:
        """One request; the cookie (the token) unless ``cookie=False``; Host as given, or ours."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        sent = {"Host": f"{self.host}:{self.port}", **(headers or {})}
        if cookie:
            sent.setdefault("Cookie", self.cookie)
        if body is not None:
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for key, value in sent.items():
                conn.putheader(key, value)
            encoded = body.encode() if body is not None else None
            if encoded is not None:
                conn.putheader("Content-Length", str(len(encoded)))
            conn.endheaders(encoded)
            response = conn.getresponse()
            data = response.read().decode("utf-8", errors="replace")
            headers_in = {k.lower(): v for k, v in response.getheaders()}
            cookies = [v for k, v in response.getheaders() if k.lower() == "set-cookie"]
            return Reply(response.status, headers_in, data, cookies)
        finally:
            conn.close()

    def get(self, path: str, **kwargs: object) -> Reply:
        return self.request("GET", path, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> tuple[int, str, str]:
        """SIGTERM, as Ctrl-C or a service manager stops it; (exit code, stdout, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate(timeout=10)
        return self.proc.returncode, out, err
