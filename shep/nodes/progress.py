"""Live progress of a foreground run on stderr: current node, elapsed time, latest activity.

On a terminal one status line is rewritten in place; otherwise each node's start
and end is a line of its own, so logs of piped runs stay readable.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from events.display import printable


class Progress:
    """Receives what the runner does and prints it. Thread-safe."""

    def __init__(self, total: int, *, stream: TextIO | None = None, interval: float = 0.5) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self._lock = threading.Lock()
        self._node = ""
        self._index = 0
        self._node_started = time.monotonic()
        self._started = time.monotonic()
        self._activity = ""
        self._interval = interval
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.live:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def node_started(self, node: str, index: int, attempt: int, iteration: int = 1) -> None:
        with self._lock:
            self._node = node if iteration == 1 else f"{node} #{iteration}"
            self._index = index
            self._node_started = time.monotonic()
            self._activity = "" if attempt == 1 else f"attempt {attempt}"
            if not self.live:
                retry = f" (attempt {attempt})" if attempt > 1 else ""
                self.stream.write(f"[{index}/{self.total}] {self._node}{retry} ...\n")
                self.stream.flush()

    def activity(self, text: str) -> None:
        with self._lock:
            self._activity = printable(" ".join(text.split()))[:100]

    def node_finished(self, node: str, ok: bool, detail: str = "") -> None:
        with self._lock:
            took = time.monotonic() - self._node_started
            word = "done" if ok else "failed"
            self._clear()
            self.stream.write(
                f"[{self._index}/{self.total}] {self._node or node} {word} in {took:.1f}s"
                f"{': ' + printable(detail) if detail else ''}\n"
            )
            self.stream.flush()

    def message(self, text: str) -> None:
        with self._lock:
            self._clear()
            self.stream.write(printable(text) + "\n")
            self.stream.flush()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K")

    def _tick(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                if not self._node:
                    continue
                elapsed = time.monotonic() - self._started
                line = (
                    f"[{self._index}/{self.total}] {self._node} "
                    f"{int(elapsed // 60)}m{int(elapsed % 60):02d}s  {self._activity}"
                )
                self.stream.write("\r\x1b[2K" + line[:120])
                self.stream.flush()
