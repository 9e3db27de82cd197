"""Make the corpus entry of this version of shep: ``python -m tests.support.corpus.make``.

(``python -m tests.support.corpus.make --convert STORE.db.gz VERSION`` makes the entry of a
store an older shep wrote, as this shep's first command leaves it, with what this shep
reads of it as the reference: how ``tests/support/histories/0.1.0/`` was made from
``tests/events/stores/shep-0.1.0.db.gz``.)

Runs the real CLI (subprocesses, the built-in demo agent) in a world at
``/tmp/shep-histories/<version>`` until its store holds runs at every
interesting point, records what a user reads of it, and writes
``tests/support/histories/<version>/`` (replacing what was there; see
``tests/support/corpus/entry.py`` for the files). The version is ``SHEP_VERSION``
(events/versions.py). Run ids, times and pids differ from one making to the
next; what the entry holds does not.

The story, one run each (its name in ``runs.json``):

- ``completed``: analyze-repository, to its end.
- ``failed``: a feature whose worktree setup command (``false``) fails.
- ``cancelled``: analyze-repository in the background, cancelled mid-node.
- ``interrupted``: analyze-repository in the background, its worker SIGKILLed
  mid-node; the next ``shep status`` records it as interrupted.
- ``question``: a feature waiting on its question.
- ``approval``: a feature, its question answered, waiting on its requirements gate.
- ``forked``: a fork of ``approval`` from its requirements gate's checkpoint: it
  waits on that gate too.
- ``supervised``: a feature in a repository whose supervisor policy is
  autonomous but for the merge: the supervisor answers its question and
  approves its requirements and plan; it waits on a person for the merge.
- ``deadline``: gated-review (tests/support/workflows.py) with a question whose
  deadline passes: the recommended option is applied by ``system:deadline``;
  it waits on its approval gate.
- ``implementing``: a feature whose worker is SIGKILLed in its implement step,
  after a task's snapshot: interrupted mid-implement.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.corpus import shared
from tests.support.corpus.entry import (
    HISTORIES,
    Entry,
    pack_store,
    pack_world,
    prepare,
    reads,
    settle,
    shep,
    wait_for,
    world_lock,
    world_root,
)

SAMPLE = Path(__file__).resolve().parents[3] / "shep" / "demo" / "sample_repo"
FEATURE = "Add a low-stock report listing items below their reorder level"
#: A fixed author and date: the repositories' first commits are the same on every making.
_GIT_DATES = {
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


def repository(env: Mapping[str, str], path: Path) -> Path:
    """A copy of shep's sample repository at ``path``, in one commit (the same on every
    making)."""
    shutil.copytree(SAMPLE, path, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run(
        "git init -q && git add -A && git commit -q -m 'Inventory sample'",
        shell=True,
        cwd=path,
        env={**env, **_GIT_DATES},
        check=True,
    )
    return path


def status(env: Mapping[str, str], run: str) -> dict[str, Any]:
    runs: list[dict[str, Any]] = json.loads(shep(env, "status", "--json"))
    return next(r for r in runs if r["run_id"] == run)


def inbox(env: Mapping[str, str], run: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(shep(env, "inbox", "--json", "--run", run))
    return items


def _newest(env: Mapping[str, str], workflow: str, known: set[str]) -> str:
    runs: list[dict[str, Any]] = json.loads(shep(env, "status", "--json"))
    fresh = [r["run_id"] for r in runs if r["workflow"] == workflow and r["run_id"] not in known]
    if len(fresh) != 1:
        raise AssertionError(f"expected one new {workflow} run, found {fresh}")
    return str(fresh[0])


_RUN_ID = re.compile(r"^[0-9a-f]{32}$", re.MULTILINE)


def _background_id(output: str) -> str:
    found = _RUN_ID.search(output)
    if found is None:
        raise AssertionError(f"no run id printed:\n{output}")
    return found.group()


def _kill_worker(env: Mapping[str, str], run: str) -> None:
    pid = status(env, run)["pid"]
    os.kill(int(pid), signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), f"worker {pid} to die", 30)


def _events(env: Mapping[str, str], run: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in shep(env, "logs", run, "--json").splitlines()]


class Story:
    """The runs of the world, made one after another."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.runs: dict[str, dict[str, Any]] = {}

    def known(self) -> set[str]:
        return {r["run_id"] for r in self.runs.values()}

    def add(self, name: str, run: str, finish: str | None) -> None:
        self.runs[name] = {"run_id": run, "finish": finish}

    def analyze(self, repo: Path) -> None:
        shep(self.env, "settings", "agent", "--agent", "demo")
        shep(self.env, "run", "analyze-repository", cwd=repo)
        self.add("completed", _newest(self.env, "analyze-repository", self.known()), None)

        slow = {**self.env, "SHEP_DEMO_DELAY": "60"}
        cancelled = _background_id(
            shep(slow, "run", "analyze-repository", "--background", cwd=repo)
        )
        wait_for(lambda: status(self.env, cancelled)["current_node"] == "scan", "a running node")
        shep(self.env, "cancel", cancelled, "--grace", "1")
        self.add("cancelled", cancelled, None)
        settle(self.root)

        interrupted = _background_id(
            shep(slow, "run", "analyze-repository", "--background", "--no-resume", cwd=repo)
        )
        wait_for(lambda: status(self.env, interrupted)["current_node"] == "scan", "a running node")
        _kill_worker(self.env, interrupted)
        settle(self.root)
        wait_for(lambda: status(self.env, interrupted)["status"] == "interrupted", "interrupted")
        self.add("interrupted", interrupted, "resume")

    def feature(self, repo: Path) -> str:
        shep(self.env, "feat", "new", FEATURE, "--background", cwd=repo)
        run = _newest(self.env, "feature", self.known())
        settle(self.root)
        return run

    def failed(self) -> None:
        repo = repository(self.env, self.root / "failing")
        shep(self.env, "settings", "workflow", "--setup-command", "false")
        shep(self.env, "feat", "new", FEATURE, cwd=repo, code=None)
        shep(self.env, "settings", "workflow", "--setup-command", "")
        settle(self.root)
        self.add("failed", _newest(self.env, "feature", self.known()), None)

    def waiting(self, repo: Path) -> None:
        question = self.feature(repo)
        self.add("question", question, "answer")

        approval = self.feature(repo)
        item = inbox(self.env, approval)[0]
        shep(self.env, "answer", item["item_id"], "--option", "1", "--wait")
        settle(self.root)
        replay = [json.loads(x) for x in shep(self.env, "replay", approval, "--json").splitlines()]
        self.add("approval", approval, "approve")

        gate = next(f for f in replay if f["kind"] == "approval")
        fork = shep(self.env, "fork", approval, "--at", gate["checkpoint_id"], "--background")
        self.add("forked", _background_id(fork), "approve")
        settle(self.root)

    def supervised(self) -> None:
        repo = repository(self.env, self.root / "supervised")
        shep(self.env, "settings", "flags", "enable", "collaboration")
        shep(
            self.env,
            "supervisor",
            "configure",
            "--scope",
            f"repo:{repo}",
            "--autonomy",
            "autonomous",
            "--override",
            "merge=advisory",
            "--max-files-changed",
            "20",
        )
        run = self.feature(repo)
        wait_for(
            lambda: [i["node"] for i in inbox(self.env, run)] == ["merge_gate"],
            "the supervisor to decide up to the merge",
            300,
        )
        settle(self.root)
        self.add("supervised", run, "approve")

    def deadline(self) -> None:
        repo = repository(self.env, self.root / "review")
        run = _background_id(
            shep(
                self.env,
                "run",
                "gated-review",
                "--input",
                "default_after=2",
                "--background",
                cwd=repo,
            )
        )
        settle(self.root)
        time.sleep(3)
        shep(self.env, "status")  # applies the deadline
        settle(self.root)
        self.add("deadline", run, "approve")

    def implementing(self, repo: Path) -> None:
        run = self.feature(repo)
        answer = inbox(self.env, run)[0]["item_id"]
        shep(self.env, "answer", answer, "--option", "1", "--wait")
        settle(self.root)
        requirements = inbox(self.env, run)[0]["item_id"]
        shep(self.env, "approve", requirements, "--wait")
        settle(self.root)
        plan = inbox(self.env, run)[0]["item_id"]
        slow = {**self.env, "SHEP_DEMO_DELAY": "8"}
        shep(slow, "approve", plan)

        def one_task_done() -> bool:
            return any(e["kind"] == "task.completed" for e in _events(self.env, run))

        wait_for(one_task_done, "a task of implement to complete", 120)
        _kill_worker(self.env, run)
        settle(self.root)
        wait_for(lambda: status(self.env, run)["status"] == "interrupted", "interrupted")
        self.add("implementing", run, "resume")


def make(version: str) -> Entry:
    """Play the story at the version's world root and write its entry."""
    root = world_root(version)
    with world_lock():
        if root.exists():
            shutil.rmtree(root)
        env = prepare(root)
        story = Story(root, env)
        repo = repository(env, root / "inventory")
        story.analyze(repo)
        story.failed()
        story.supervised()
        story.waiting(repo)
        story.deadline()
        story.implementing(repo)
        settle(root)
        entry = _record(root, env, version, story.runs)
        pack_store(root / "home" / "shep.db", entry.path / "shep.db.gz")
        parts = tuple(p.name for p in sorted(root.iterdir()) if p.name not in ("bin", "tmp"))
        pack_world(root, parts, entry.path / "world.tar.gz")
        _shared_copy(env, entry)
    return entry


def convert(version: str, store: Path) -> Entry:
    """The entry of a store an older shep wrote (gzipped), as the first command of this
    shep leaves it (migrated; a run that never started marked interrupted: a write no two
    openings make alike), with what this shep reads of it as the reference. Its runs are
    all taken as over (nothing is resumed): see the entry's README."""
    root = world_root(version)
    with world_lock():
        if root.exists():
            shutil.rmtree(root)
        env = prepare(root)
        home = root / "home"
        home.mkdir(mode=0o700)
        with gzip.open(store) as packed, (home / "shep.db").open("wb") as db:
            shutil.copyfileobj(packed, db)
        found: list[dict[str, Any]] = json.loads(shep(env, "status", "--json"))
        runs: dict[str, dict[str, Any]] = {
            f"run-{r['run_id'][:8]}": {"run_id": r["run_id"], "finish": None} for r in found
        }
        entry = _record(root, env, version, runs)
        pack_store(home / "shep.db", entry.path / "shep.db.gz")
        _shared_copy(env, entry)
    return entry


def _shared_copy(env: Mapping[str, str], entry: Entry) -> None:
    """Where PostgreSQL is installed: the store moved into a shared store and dumped into
    the entry, after checking that it reads the same there."""
    with shared.server() as pg:
        if pg is None:
            print("PostgreSQL is not installed: the entry has no shared-store copy.")
            return
        url = shared.dump(env, pg, entry.path / shared.SHARED)
        ids = {name: r["run_id"] for name, r in entry.runs.items()}
        root = world_root(entry.version)
        found = reads({**env, "SHEP_DATABASE_URL": url}, ids, root)
        recorded = entry.outputs()
        differing = [name for name in recorded if found.get(name) != recorded[name]]
        if differing:
            raise AssertionError(f"the shared store reads otherwise: {differing}")


def _record(
    root: Path, env: Mapping[str, str], version: str, runs: dict[str, dict[str, Any]]
) -> Entry:
    """Write the entry of ``version`` (replacing it) but for its store and world: the runs
    with their statuses, what a user reads (read twice: the readings must agree), and an
    empty ``changes``."""
    ids = {name: r["run_id"] for name, r in runs.items()}
    for name, run in ids.items():
        runs[name]["status"] = status(env, run)["status"]
    outputs = reads(env, ids, root)
    if reads(env, ids, root) != outputs:
        raise AssertionError("two readings of the store differ: something is not masked")
    target = HISTORIES / version
    kept = target / "README.md"  # written by hand, for a converted store
    readme = kept.read_text() if kept.exists() else None
    if target.exists():
        shutil.rmtree(target)
    entry = Entry(target)
    target.mkdir(parents=True)
    if readme is not None:
        kept.write_text(readme)
    entry.write_outputs(outputs)
    (target / "runs.json").write_text(json.dumps(runs, indent=2, sort_keys=True) + "\n")
    (target / "changes").write_text(
        f"# Differences a later shep may show when it reads the store of shep {version}.\n"
        "# One a line: `FILE KEY  # why` (FILE a glob of outputs/, KEY a JSON key or *).\n"
    )
    return entry


def main(argv: list[str]) -> int:
    from events.versions import SHEP_VERSION

    if len(argv) == 4 and argv[1] == "--convert":
        entry = convert(argv[3], Path(argv[2]))
    elif len(argv) == 1:
        entry = make(SHEP_VERSION)
    else:
        print(
            "usage: python -m tests.support.corpus.make"
            f"  (makes tests/support/histories/{SHEP_VERSION}/)\n"
            "       python -m tests.support.corpus.make --convert STORE.db.gz VERSION"
        )
        return 2
    sizes = ", ".join(
        f"{p.name} {p.stat().st_size // 1024} KB"
        for p in sorted(entry.path.iterdir())
        if p.is_file()
    )
    print(f"Wrote {entry.path}: {len(entry.runs)} runs; {sizes}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
