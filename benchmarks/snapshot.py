"""The cost of ``shep.git.snapshot`` against ``git stash create`` on the same tree.

    python benchmarks/snapshot.py [--quick]

A repository of 10,000 committed files (2,000 with ``--quick``) in 100 directories,
with 20 files changed since the commit: 14 tracked files edited and 6 new untracked
ones. Each round times one ``snapshot()`` (a private copy of the index, ``add -A``,
``write-tree``, ``commit-tree``, ``update-ref``: five git processes and an identity
lookup) and one ``git stash create`` (git's own "commit the worktree without touching
it", one process, which leaves untracked files out), interleaved; each figure is the
median of the rounds.

- ``snapshot_ms`` / ``snapshot_stash_create_ms``: the two wall times.
- ``snapshot_ratio``: snapshot / stash create (goal: <= 1.5).
- ``snapshot_cpu_ratio``: the same for the CPU time (user + system) of the git
  processes, steadier than wall times on a loaded machine.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shep.git import snapshot  # noqa: E402

DIRS = 100
CHANGED = 14
UNTRACKED = 6


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@localhost",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@localhost",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def make_repo(repo: Path, files: int) -> None:
    """``files`` committed files, then 20 changes (14 edits, 6 untracked files).

    The commit is written with ``git fast-import`` (one pack) rather than ``git add``
    (a loose object per file), which keeps the setup of a big repository quick.
    """
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "bench")
    _git(repo, "config", "user.email", "bench@localhost")
    past = time.time() - 3600
    stream = bytearray()
    tree = bytearray()
    paths = []
    for i in range(files):
        name = f"d{i % DIRS:03d}/file{i:05d}.py"
        data = (f"# file {i}\n" + "x = 1\n" * (i % 40)).encode()
        path = repo / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        # Older than the index git writes next: no entry is "racily clean", as in a
        # real repository whose files were not all written in the last second.
        os.utime(path, (past, past))
        paths.append(path)
        stream += b"blob\nmark :%d\ndata %d\n%s\n" % (i + 1, len(data), data)
        tree += b"M 100644 :%d %s\n" % (i + 1, name.encode())
    stream += (
        b"commit refs/heads/main\ncommitter bench <bench@localhost> 0 +0000\ndata 7\ninitial\n"
    )
    stream += tree + b"\n"
    subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet"], input=bytes(stream), check=True
    )
    # The index of the commit, with its cache of trees (as `git commit` leaves it) and
    # the files' stat data.
    _git(repo, "read-tree", "HEAD")
    _git(repo, "update-index", "-q", "--refresh")
    step = files // CHANGED
    for path in paths[::step][:CHANGED]:
        path.write_text(path.read_text() + "y = 2\n")
    for i in range(UNTRACKED):
        (repo / f"d{i:03d}" / f"new{i}.py").write_text(f"new = {i}\n")


def _timed(action: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child processes) of ``action``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    action()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def bench(quick: bool) -> dict[str, float]:
    """Median wall times of snapshot() and `git stash create`, and their ratio."""
    files = 2_000 if quick else 10_000
    rounds = 5 if quick else 11
    with tempfile.TemporaryDirectory(prefix="shep-bench-snap-") as tmp:
        repo = Path(tmp) / "repo"
        make_repo(repo, files)
        stash = ["git", "-C", str(repo), "stash", "create"]

        def ours(n: int) -> tuple[float, float]:
            return _timed(lambda: snapshot(repo, f"refs/shep/bench/{n}", message=f"s {n}"))

        def baseline() -> tuple[float, float]:
            return _timed(lambda: subprocess.run(stash, check=True, capture_output=True))

        ours(0)  # warm the page cache (and git's stat cache) for both sides alike
        baseline()
        mine: list[tuple[float, float]] = []
        theirs: list[tuple[float, float]] = []
        for n in range(1, rounds + 1):
            mine.append(ours(n))
            theirs.append(baseline())
    ms = statistics.median(wall for wall, _ in mine) * 1000
    base_ms = statistics.median(wall for wall, _ in theirs) * 1000
    cpu = statistics.median(cpu for _, cpu in mine)
    base_cpu = statistics.median(cpu for _, cpu in theirs)
    return {
        "snapshot_files": files,
        "snapshot_ms": round(ms, 2),
        "snapshot_stash_create_ms": round(base_ms, 2),
        "snapshot_ratio": round(ms / base_ms, 3),
        "snapshot_cpu_ratio": round(cpu / base_cpu, 3),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(bench("--quick" in sys.argv), indent=2))
