"""A stand-in for any agent CLI: replays a captured sample, records how it was called.

Driven by environment variables (tests pass them through the executor's ``env=``):

- ``FAKE_RECORD``: write ``{"argv", "stdin", "env", "cwd", "files"}`` as JSON to this
  path; ``files`` holds the content of every argv value that names a file (after a
  ``--flag=`` prefix too), read before the executor removes it.
- ``FAKE_STDOUT`` / ``FAKE_STDERR``: files replayed to stdout / stderr.
  ``FAKE_STDOUT_STREAM`` replaces ``FAKE_STDOUT`` when argv asks for stream-json.
- ``FAKE_EXIT``: the exit code (default 0).
- ``FAKE_MODE``: a misbehaviour, one of
  ``hang`` (start a grandchild, write both pids to ``FAKE_PIDFILE``, sleep forever),
  ``linger`` (print the sample, leave a grandchild holding stdout open, and keep
  running), ``orphan-pipe`` (print the sample, leave a grandchild holding stdout,
  exit), ``flood`` (``FAKE_FLOOD_MB`` MiB on stdout without a newline),
  ``stderr-flood`` (``FAKE_FLOOD_MB`` MiB on stderr, then the sample),
  ``truncate`` (only the first ``FAKE_TRUNCATE`` bytes of the sample),
  ``slow`` (the sample line by line, ``FAKE_DELAY`` s apart, pids to ``FAKE_PIDFILE``),
  ``long`` (a long session: the sample with its second line printed again and again,
  until ``FAKE_FLOOD_MB`` MiB in all, before the rest; its pid to ``FAKE_PIDFILE``).
- ``FAKE_IGNORE_TERM``: ignore SIGTERM (tests the SIGKILL after the grace period).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

_SLEEPER = "import time\nwhile True: time.sleep(1)\n"


def _read(name: str) -> bytes:
    path = os.environ.get(name)
    if not path:
        return b""
    with open(path, "rb") as f:
        return f.read()


def _write_pids(*pids: int) -> None:
    path = os.environ.get("FAKE_PIDFILE")
    if path:
        with open(path, "w") as f:
            f.write(" ".join(str(p) for p in pids))


def _grandchild(*, hold_stdout: bool) -> int:
    # Inherits our process group (and stdout, if asked): the executor must kill it.
    child = subprocess.Popen(
        [sys.executable, "-c", _SLEEPER],
        stdin=subprocess.DEVNULL,
        stdout=None if hold_stdout else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return child.pid


def _files(argv: list[str]) -> dict[str, str]:
    files = {}
    for arg in argv:
        path = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                files[arg] = f.read()
    return files


def main() -> int:
    if os.environ.get("FAKE_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stdin = sys.stdin.read() if not sys.stdin.isatty() else ""
    record = os.environ.get("FAKE_RECORD")
    if record:
        with open(record, "w") as f:
            json.dump(
                {
                    "argv": sys.argv[1:],
                    "stdin": stdin,
                    "env": dict(os.environ),
                    "cwd": os.getcwd(),
                    "files": _files(sys.argv[1:]),
                },
                f,
            )
    streaming = "stream-json" in sys.argv
    if streaming and "FAKE_STDOUT_STREAM" in os.environ:
        stdout = _read("FAKE_STDOUT_STREAM")
    else:
        stdout = _read("FAKE_STDOUT")
    stderr = _read("FAKE_STDERR")
    mode = os.environ.get("FAKE_MODE", "")
    out = sys.stdout.buffer
    err = sys.stderr.buffer

    if mode == "hang":
        _write_pids(os.getpid(), _grandchild(hold_stdout=False))
        while True:
            time.sleep(1)
    if mode == "flood":
        chunk = b"x" * (1 << 20)
        for _ in range(int(os.environ.get("FAKE_FLOOD_MB", "50"))):
            out.write(chunk)
        out.flush()
        return 0
    if mode == "stderr-flood":
        chunk = b"e" * (1 << 20)
        for _ in range(int(os.environ.get("FAKE_FLOOD_MB", "8"))):
            err.write(chunk)
        err.flush()
    if mode == "long":
        _write_pids(os.getpid())
        lines = stdout.splitlines(keepends=True)
        out.write(lines[0])
        total, limit = len(lines[0]), int(os.environ.get("FAKE_FLOOD_MB", "40")) << 20
        while total < limit:
            out.write(lines[1])
            total += len(lines[1])
        stdout = b"".join(lines[1:])
    if mode == "truncate":
        stdout = stdout[: int(os.environ.get("FAKE_TRUNCATE", "100"))]
    if mode == "slow":
        _write_pids(os.getpid())
        for line in stdout.splitlines(keepends=True):
            out.write(line)
            out.flush()
            time.sleep(float(os.environ.get("FAKE_DELAY", "0.2")))
    else:
        out.write(stdout)
        out.flush()
    err.write(stderr)
    err.flush()
    if mode in ("linger", "orphan-pipe"):
        _write_pids(os.getpid(), _grandchild(hold_stdout=True))
        if mode == "linger":
            while True:
                time.sleep(1)
    return int(os.environ.get("FAKE_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main())
