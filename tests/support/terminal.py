"""Run the real CLI on a real pseudo-terminal of a given size, the way a person at one does.

``pty.fork`` makes the child a session leader whose controlling terminal is
the pty, so ``isatty`` is true for stdin, stdout and stderr, Ctrl-C typed
into it is a real SIGINT, and prompt-toolkit reads the window size that was
set before ``exec``. What the program writes goes through pyte, a VT100
emulator of the same size, so ``display()`` is what a person would see on the
screen (a line cut at the edge is cut there too); ``text()`` is everything
written, escape codes removed, for what scrolled away.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time
from collections.abc import Mapping
from pathlib import Path

import pyte

_CSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-B]|\x1b[=>78]"
)


class Terminal:
    """``python -m shep ARGS`` on a pty of ``columns`` x ``rows``; nobody types unless told."""

    def __init__(
        self,
        *args: str,
        columns: int = 80,
        rows: int = 24,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        full_env = {**os.environ, "TERM": "xterm", **(env or {})}
        full_env.pop("COLUMNS", None)
        full_env.pop("LINES", None)
        argv = [sys.executable, "-m", "shep", *args]
        pid, fd = pty.fork()
        if pid == 0:  # the child: set the size on its terminal, then become shep
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
                if cwd is not None:
                    os.chdir(cwd)
                os.execve(sys.executable, argv, full_env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.screen = _Screen(columns, rows, fd)
        self._stream = pyte.ByteStream(self.screen)
        self.output = b""
        self.returncode: int | None = None

    def read(self, timeout: float = 0.1) -> bytes:
        """What the program wrote within ``timeout`` seconds (b"" once it has closed)."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return b""
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: every copy of the terminal's other side is closed
            return b""
        self.output += data
        self._stream.feed(data)
        return data

    def expect(self, text: str, timeout: float = 30) -> None:
        """Read until ``text`` is on the screen or in what was written (escape codes left
        out); fail with the screen as it is.
        """
        deadline = time.monotonic() + timeout
        while not self.shows(text):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{text!r} not seen in {timeout}s; screen:\n" + "\n".join(self.display())
                )
            if not self.read() and self.poll() is not None and not self._pending():
                raise AssertionError(
                    f"{text!r} not seen; shep exited {self.returncode}; screen:\n{self.text()}"
                )

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float = 60) -> int:
        """Read everything until the program exits; its exit code (kill it past ``timeout``)."""
        deadline = time.monotonic() + timeout
        while self.poll() is None or self._pending():
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"shep did not finish in {timeout}s; screen:\n{self.text()}")
            self.read()
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.returncode = -9

    def close(self) -> None:
        self.kill()
        os.close(self.fd)

    def shows(self, text: str) -> bool:
        """Whether ``text`` (outer spaces aside) is on the screen now, or was written."""
        text = text.strip()
        return text in "\n".join(self.display()) or text in self.text()

    def display(self) -> list[str]:
        """The screen's lines as shown now, trailing blanks removed."""
        return [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        """The output without escape codes, ``\\r\\n`` as ``\\n``: roughly what was shown."""
        return screen_text(self.output.decode("utf-8", "replace"))

    def _pending(self) -> bool:
        ready, _, _ = select.select([self.fd], [], [], 0)
        if not ready:
            return False
        return bool(self.read(0))


class _Screen(pyte.Screen):
    """A screen that answers the program's questions (cursor position) as a terminal does."""

    def __init__(self, columns: int, rows: int, fd: int) -> None:
        super().__init__(columns, rows)
        self.fd = fd

    def write_process_input(self, data: str) -> None:
        os.write(self.fd, data.encode())


def screen_text(raw: str) -> str:
    """``raw`` terminal output with escape sequences removed and line ends as ``\\n``."""
    return _CSI.sub("", raw).replace("\r\n", "\n").replace("\r", "\n")
