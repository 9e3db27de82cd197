"""Running one agent CLI as a subprocess, with the discipline every executor shares.

Each call gets its own process group (``start_new_session``) so that a timeout,
a cancellation or a child that will not let go of its pipes ends with the whole
group killed: SIGTERM, then SIGKILL after a grace period. stdout and stderr are
read by two threads so that a flood on one cannot block the other; stdout is
handed over line by line, stderr keeps only its tail.

What the cap (``output_cap``, the ``agent_output_mib`` setting) bounds is
memory, not volume: one line longer than it stops the agent, and the lines read
but not yet handled never add up to more than it (the reader then waits, and the
agent with it, as a pipe makes a writer wait). A long session that streams
gigabytes line by line, each handled (recorded) as it comes, never meets it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TypeAlias

from events.errors import AgentError, AgentNotFoundError, AgentOutputError, AgentTimeoutError

__all__ = [
    "LAUNCHER",
    "AgentProcess",
    "Launcher",
    "ProcessLimits",
    "ProcessOutcome",
    "describe_cap",
    "kill_group",
    "output_limits",
]

#: ``launcher(popen)`` starts an agent's process by calling ``popen()`` (or raises
#: instead) and returns it. A worker sets one around its agent calls so that each
#: start is decided and recorded atomically with its ownership of the run
#: (``shep.nodes.agent``); outside a worker, agents start directly.
Launcher: TypeAlias = Callable[[Callable[[], subprocess.Popen[bytes]]], subprocess.Popen[bytes]]
LAUNCHER: ContextVar[Launcher | None] = ContextVar("shep_agent_launcher", default=None)

_CHUNK = 64 * 1024
_POLL = 0.05
_MIB = 1024 * 1024


def describe_cap(cap: int) -> str:
    """``32 MiB`` (or bytes, for a cap below one MiB: tests use small ones)."""
    return f"{cap / _MIB:g} MiB" if cap >= _MIB else f"{cap} bytes"


@dataclass(frozen=True)
class ProcessLimits:
    """Time and size bounds for one agent subprocess.

    ``output_cap``: bytes of stdout held in memory at once (the longest line, and the
    lines read ahead of the parser); never the total. ``linger``: once the agent printed
    its final result, how long its main process may keep running before shep stops it.
    ``drain``: once the main process exited, how long to keep reading a pipe that a
    leftover child still holds open.
    """

    kill_grace: float = 5.0
    output_cap: int = 32 * 1024 * 1024
    linger: float = 5.0
    drain: float = 1.0
    stderr_tail: int = 64 * 1024
    version_timeout: float = 15.0


def output_limits(output_mib: int) -> ProcessLimits:
    """The default bounds with ``output_mib`` MiB as the cap (the ``agent_output_mib`` setting)."""
    return ProcessLimits(output_cap=output_mib * _MIB)


@dataclass(frozen=True)
class ProcessOutcome:
    """How the subprocess ended.

    ``exit_code`` is ``None`` when shep stopped the process itself after its final
    result (it lingered); a negative value means it died from that signal.
    """

    exit_code: int | None
    stderr: str
    stdout_bytes: int
    duration_ms: int


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


_EOF = _Marker("eof")
_OVERFLOW = _Marker("overflow")


class AgentProcess:
    """One running agent CLI; use as a context manager so the group is always reaped."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None,
        env: Mapping[str, str],
        cwd: str | None,
        limits: ProcessLimits,
        timeout: float | None,
        agent: str,
        label: str,
        install_hint: str,
    ) -> None:
        self._argv = list(argv)
        self._stdin = stdin
        self._env = dict(env)
        self._cwd = cwd
        self._limits = limits
        self._timeout = timeout
        self._agent = agent
        self._label = label
        self._install_hint = install_hint
        self._lines: queue.SimpleQueue[bytes | _Marker] = queue.SimpleQueue()
        self._pending = bytearray()
        self._pending_lock = threading.Lock()
        self._last_output_at = 0.0
        self._stderr = bytearray()
        self._stderr_lock = threading.Lock()
        self._stdout_bytes = 0
        #: Bytes of lines read and queued but not yet taken by ``lines()``; the stdout
        #: reader waits on ``_room`` while they exceed the cap.
        self._queued = 0
        self._room = threading.Condition()
        self._closing = False
        self._threads: list[tuple[threading.Thread, IO[bytes]]] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = 0.0
        self._deadline: float | None = None
        self._result_at: float | None = None
        self._exited_at: float | None = None
        self._stopped_by_us = False
        self._reaped = False

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> AgentProcess:
        self._start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Reached on success, on errors and on cancellation (KeyboardInterrupt, a
        # closed generator): whatever is left of the group goes.
        self._reap()

    def _popen(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self._argv,
            stdin=subprocess.PIPE if self._stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self._cwd,
            env=self._env,
            start_new_session=True,
        )

    def _start(self) -> None:
        if self._cwd is not None and not Path(self._cwd).is_dir():
            raise AgentError(
                f"{self._label}: the working directory {self._cwd} does not exist.",
                agent=self._agent,
            )
        launch = LAUNCHER.get()
        try:
            self._proc = self._popen() if launch is None else launch(self._popen)
        except FileNotFoundError as e:
            raise AgentNotFoundError(
                f"{self._label}: `{self._argv[0]}` was not found. Install it with "
                f"`{self._install_hint}`, or put it on PATH.",
                agent=self._agent,
            ) from e
        except PermissionError as e:
            raise AgentNotFoundError(
                f"{self._label}: `{self._argv[0]}` is not executable ({e.strerror}).",
                agent=self._agent,
            ) from e
        except OSError as e:
            raise AgentNotFoundError(
                f"{self._label}: cannot start `{self._argv[0]}`: {e.strerror or e}.",
                agent=self._agent,
            ) from e
        self._started = time.monotonic()
        if self._timeout is not None:
            self._deadline = self._started + self._timeout
        proc = self._proc
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._spawn(self._pump_stdout, proc.stdout)
        self._spawn(self._pump_stderr, proc.stderr)
        if self._stdin is not None:
            assert proc.stdin is not None
            self._spawn(self._feed_stdin, proc.stdin)

    def _spawn(self, target: Callable[[IO[bytes]], None], stream: IO[bytes]) -> None:
        thread = threading.Thread(target=target, args=(stream,), daemon=True)
        thread.start()
        self._threads.append((thread, stream))

    # -- the reading side, as the executor sees it --------------------------------------

    def lines(self) -> Iterator[bytes]:
        """Yield stdout lines (without the newline) until the agent is done.

        Done means: stdout closed; or the main process exited and ``drain`` passed;
        or ``mark_result()`` was called and the main process kept running for
        ``linger``. Raises ``AgentTimeoutError`` past the timeout and
        ``AgentOutputError`` past the output cap, with the group killed first.
        """
        proc = self._require()
        while True:
            try:
                item = self._lines.get(timeout=_POLL)
            except queue.Empty:
                item = None
            if item is _EOF:
                return
            if item is _OVERFLOW:
                self._kill()
                raise AgentOutputError(
                    f"{self._label} printed a line of more than "
                    f"{describe_cap(self._limits.output_cap)} on stdout (a line is held in "
                    "memory whole); shep stopped it. If that is expected, raise the cap: "
                    "shep settings set agent_output_mib N.",
                    agent=self._agent,
                )
            if isinstance(item, bytes):
                with self._room:
                    self._queued -= len(item)
                    self._room.notify()
                yield item
            now = time.monotonic()
            if self._deadline is not None and now >= self._deadline:
                self._kill()
                raise self._timeout_error()
            if item is not None:
                continue  # lines are still queued: the idle rules below wait for them
            if self._exited_at is None and proc.poll() is not None:
                self._exited_at = now
            exited = self._exited_at is not None and now - self._exited_at >= self._limits.drain
            lingered = (
                self._exited_at is None
                and self._result_at is not None
                and now - self._result_at >= self._limits.linger
            )
            if exited or lingered:
                # Stop reading: the agent is done, whoever still holds its stdout is not.
                if tail := self._take_pending():
                    yield tail
                return
            if now - self._last_output_at >= self._limits.drain and (tail := self._take_pending()):
                # A last line without its newline, idle for a while (Gemini's JSON ends
                # so): hand it over so the parser can see that the result is complete.
                yield tail

    def mark_result(self) -> None:
        """The agent printed its final result: from now on it only has ``linger`` left."""
        if self._result_at is None:
            self._result_at = time.monotonic()

    def finish(self) -> ProcessOutcome:
        """Wait for the main process, reap the group and report how the process ended.

        A process that closed stdout but keeps running is waited for until the
        timeout, or, once it printed its result, for ``linger`` at most.
        """
        proc = self._require()
        if proc.poll() is None:
            limit = self._deadline
            if self._result_at is not None:
                linger_end = self._result_at + self._limits.linger
                limit = linger_end if limit is None else min(limit, linger_end)
            try:
                proc.wait(timeout=None if limit is None else max(0.0, limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                if self._result_at is None:
                    self._kill()
                    raise self._timeout_error() from None
                self._stopped_by_us = True
        self._reap()
        exit_code = None if self._stopped_by_us else proc.returncode
        with self._stderr_lock:
            stderr = self._stderr.decode("utf-8", errors="replace")
        return ProcessOutcome(
            exit_code=exit_code,
            stderr=stderr,
            stdout_bytes=self._stdout_bytes,
            duration_ms=int((time.monotonic() - self._started) * 1000),
        )

    # -- internals ---------------------------------------------------------------------

    def _require(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise RuntimeError("AgentProcess used outside its `with` block")
        return self._proc

    def _timeout_error(self) -> AgentTimeoutError:
        return AgentTimeoutError(
            f"{self._label} did not finish within {self._timeout:g} s; shep killed its "
            "process group. Raise the timeout or split the task.",
            agent=self._agent,
        )

    def _kill(self) -> None:
        self._stopped_by_us = True
        kill_group(self._require(), self._limits.kill_grace)

    def _reap(self) -> None:
        proc = self._proc
        if proc is None or self._reaped:
            return
        self._reaped = True
        with self._room:
            self._closing = True  # a reader waiting for room gives up
            self._room.notify_all()
        # Kill the group even when the main process exited on its own: a child it left
        # behind (holding our pipes, or just running) must not outlive the call.
        kill_group(proc, self._limits.kill_grace)
        for thread, stream in self._threads:
            thread.join(timeout=1.0)
            # A pipe still held by a process outside the group keeps its reader blocked;
            # closing the fd under it could hand the number to an unrelated file, so
            # that pipe is left to the daemon thread.
            if not thread.is_alive():
                with contextlib.suppress(OSError):
                    stream.close()

    def _pump_stdout(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        cap = self._limits.output_cap
        try:
            while chunk := os.read(fd, _CHUNK):
                self._last_output_at = time.monotonic()
                self._stdout_bytes += len(chunk)
                parts = chunk.split(b"\n")
                with self._pending_lock:
                    self._pending += parts[0]
                    lines = [bytes(self._pending), *parts[1:-1]] if len(parts) > 1 else []
                    if lines:
                        self._pending = bytearray(parts[-1])
                    too_long = len(self._pending) > cap or any(len(x) > cap for x in lines)
                if too_long:
                    self._lines.put(_OVERFLOW)
                    return
                if lines and not self._queue(lines):
                    return
        except OSError:
            pass
        if tail := self._take_pending():
            self._queue([tail])
        self._lines.put(_EOF)

    def _queue(self, lines: list[bytes]) -> bool:
        """Hand ``lines`` to ``lines()``, first waiting while what it has not taken yet
        exceeds the cap (the agent then waits on its full pipe); False once reaping.
        """
        size = sum(len(line) for line in lines)
        with self._room:
            while self._queued > 0 and self._queued + size > self._limits.output_cap:
                if self._closing:
                    return False
                self._room.wait(_POLL)
            self._queued += size
        for line in lines:
            self._lines.put(line)
        return True

    def _take_pending(self) -> bytes:
        """The unterminated last line read so far (handed over when reading stops)."""
        with self._pending_lock:
            pending, self._pending = bytes(self._pending), bytearray()
        return pending

    def _pump_stderr(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        keep = self._limits.stderr_tail
        try:
            while chunk := os.read(fd, _CHUNK):
                with self._stderr_lock:
                    self._stderr += chunk
                    if len(self._stderr) > keep:
                        del self._stderr[: len(self._stderr) - keep]
        except OSError:
            pass

    def _feed_stdin(self, pipe: IO[bytes]) -> None:
        assert self._stdin is not None
        with contextlib.suppress(OSError, ValueError):
            pipe.write(self._stdin)
        with contextlib.suppress(OSError, ValueError):
            pipe.close()


def kill_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group of ``proc``; SIGKILL whatever is left after ``grace`` s."""
    from shep.home.procs import group_alive

    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    if not _signal_group(pgid, signal.SIGTERM):
        proc.wait()
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader so it stops counting as a member
        if not group_alive(pgid):
            break
        time.sleep(0.02)
    else:
        _signal_group(pgid, signal.SIGKILL)
    proc.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True
