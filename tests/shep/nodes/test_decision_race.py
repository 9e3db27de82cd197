"""Two people decide one item at the same moment: the first decision wins, the other is told.

The items are made at the store level (``tests.support.store_items``: the run is
back in a worker's hands, this test process's, as when its other question was
answered), so that a race costs two processes and no worker: the winner's
``shep answer`` finds the run running and leaves it to its worker. The racers
are real ``shep`` processes (``shep.cli.main``, as ``python -m shep`` runs it)
that import shep first and then wait at a barrier (a file), so that both
reach the decision together rather than one finishing its imports first.
Each racer also leaves a mark when the fold it decides on shows the item
undecided: when both racers mark, both appended, and the store's
compare-and-set alone chose the winner."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import pytest

from events.inbox import ApprovalGranted, ApprovalRejected, QuestionAnswered
from events.store import EventStore
from tests.support.cli import shep
from tests.support.event_log import decisions_of, read_events
from tests.support.store_items import ask_on_new_run, gate, question

REPETITIONS = 50

RACER = """
import os, sys, time
import shep.cli, shep.cli.inbox, shep.cli.run, shep.runs.inbox_watch
import commands.answer_question, commands.approve_item, commands.reject_item
import projections.inbox_queries, projections.catch_up, events.store
import commands.inbox_state as inbox_state
ready, go, *argv = sys.argv[1:]
original = inbox_state.load_item


def load_item(store, item_id):
    # Evidence, not behaviour: marks that this racer saw the item undecided just
    # before appending its decision (both racers marking means a true race).
    item = original(store, item_id)
    if item is not None and item.decision is None:
        open(ready + ".undecided", "w").close()
    return item


inbox_state.load_item = load_item
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.0002)
shep.cli.main(argv)
"""


def _item_on_a_running_run(store: EventStore, repo: Path, n: int, kind: str) -> UUID:
    """A run in this (live) process's hands with one pending item of ``kind``; its item id."""
    ask = question(f"race-{n}") if kind == "question" else gate(f"race-{n}")
    _, [item] = ask_on_new_run(store, repo, [ask], resumed=True)
    return item


Results = tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]


@dataclass
class _Racers:
    """One race's two ``shep`` processes, importing or waiting at their barrier."""

    go: Path
    ready: list[Path]
    procs: list[subprocess.Popen[str]]
    argvs: tuple[list[str], list[str]]


def _line_up(tmp: Path, n: int, left: list[str], right: list[str]) -> _Racers:
    """Start both ``shep`` commands of race ``n``; they wait at the barrier."""
    go = tmp / f"go-{n}"
    ready = [tmp / f"ready-{n}-{side}" for side in ("left", "right")]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(flag), str(go), *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for flag, argv in zip(ready, (left, right), strict=True)
    ]
    return _Racers(go, ready, procs, (left, right))


def _release(racers: _Racers) -> None:
    """Once both wait at the barrier, let them go together."""
    deadline = time.monotonic() + 30
    while not all(flag.exists() for flag in racers.ready):
        assert time.monotonic() < deadline, "the racers never reached the barrier"
        time.sleep(0.001)
    racers.go.touch()


def _results(racers: _Racers) -> Results:
    done = []
    for proc, argv in zip(racers.procs, racers.argvs, strict=True):
        out, err = proc.communicate(timeout=60)
        done.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    return done[0], done[1]


def _races(tmp: Path, pairs: list[tuple[list[str], list[str]]]) -> Iterator[Results]:
    """Run the races one after another, each pair released together.

    The next pair is started as soon as the current one is released, so its
    imports overlap the current race (they cannot join it: they wait at their
    own barrier).
    """
    lined_up = _line_up(tmp, 0, *pairs[0])
    for n in range(len(pairs)):
        current = lined_up
        _release(current)
        if n + 1 < len(pairs):
            lined_up = _line_up(tmp, n + 1, *pairs[n + 1])
        yield _results(current)


def _when(decision: QuestionAnswered | ApprovalGranted | ApprovalRejected) -> str:
    return decision.timestamp.strftime("%Y-%m-%d %H:%M:%S UTC")


@pytest.mark.slow
def test_two_answers_at_once_exactly_one_wins(
    repo: Path, store: EventStore, shep_home: Path, tmp_path: Path
) -> None:
    """50 times, two `shep answer` processes answer one question at the same moment: one
    exits 0, the other exits 3 with one line naming the winner's answer, actor and time;
    the log holds exactly the winner's decision on each item.
    """
    items = [_item_on_a_running_run(store, repo, n, "question") for n in range(REPETITIONS)]
    winners: Counter[str] = Counter()
    pairs = [
        (
            ["answer", item.hex, "--option", "small", "--as", "alice"],
            ["answer", item.hex[:8], "--option", "large", "--as", "bob"],
        )
        for item in items
    ]
    for item, results in zip(items, _races(tmp_path, pairs), strict=True):
        codes = sorted(r.returncode for r in results)
        assert codes == [0, 3], [(r.returncode, r.stderr) for r in results]
        [decision] = decisions_of(read_events(shep_home), item)
        assert isinstance(decision, QuestionAnswered)
        won, lost = (results[0], results[1]) if results[0].returncode == 0 else results[::-1]
        who = "alice" if won is results[0] else "bob"
        winners[who] += 1
        option, label = (
            ("small", "Small: one module")
            if who == "alice"
            else ("large", "Large: the whole package")
        )
        assert (decision.actor, decision.answer, decision.option_id) == (
            f"user:{who}",
            label,
            option,
        )
        assert won.stdout == f"Answered {item.hex[:8]}: {label}\n"
        assert lost.stdout == ""
        error = (
            f"shep: Item {item.hex[:8]} was already answered {label!r} by user:{who} "
            f"at {_when(decision)}."
        )
        lines = lost.stderr.splitlines()
        assert lines[-1] == error, lost.stderr
        assert [line for line in lines if line.startswith("shep:")] == [error]
    events = read_events(shep_home)
    assert len([e for e in events if isinstance(e, QuestionAnswered)]) == REPETITIONS
    assert all(len(decisions_of(events, item)) == 1 for item in items)
    both_appended = sum(
        all((tmp_path / f"ready-{n}-{side}.undecided").exists() for side in ("left", "right"))
        for n in range(REPETITIONS)
    )
    print(f"winners: {dict(winners)}; both racers appended in {both_appended} races")
    assert both_appended > 0, "the barrier never made the racers append together"


def test_approve_and_reject_at_once_exactly_one_wins(
    repo: Path, store: EventStore, shep_home: Path, tmp_path: Path
) -> None:
    """Ten times, `shep approve` and `shep reject` hit one gate at the same moment: one
    exits 0, the other exits 3 naming what the winner decided; one decision in the log.
    """
    items = [_item_on_a_running_run(store, repo, n, "approval") for n in range(10)]
    pairs = [
        (
            ["approve", item.hex, "--as", "alice"],
            ["reject", item.hex, "--reason", "not yet", "--as", "bob"],
        )
        for item in items
    ]
    for item, results in zip(items, _races(tmp_path, pairs), strict=True):
        assert sorted(r.returncode for r in results) == [0, 3], [r.stderr for r in results]
        [decision] = decisions_of(read_events(shep_home), item)
        approved = results[0].returncode == 0
        assert isinstance(decision, ApprovalGranted if approved else ApprovalRejected)
        who, what = ("alice", "approved") if approved else ("bob", "rejected")
        assert decision.actor == f"user:{who}"
        lost = results[1] if approved else results[0]
        assert lost.stderr.splitlines()[-1] == (
            f"shep: Item {item.hex[:8]} was already {what} by user:{who} at {_when(decision)}."
        )


@pytest.mark.slow
def test_racers_that_name_the_run_lose_with_who_approved_first(
    repo: Path, store: EventStore, shep_home: Path, tmp_path: Path
) -> None:
    """Ten times, two `shep approve RUN` (the run named, not the item) at the same moment:
    one exits 0, the other exits 3 saying who approved the run's gate first and when,
    whether it lost at the store (both saw the gate pending) or found the gate decided
    already (the inbox no longer lists it); so does one who comes a moment later.
    """
    runs = []
    for n in range(10):
        run, [item] = ask_on_new_run(store, repo, [gate(f"race-{n}")], resumed=True)
        runs.append((run, item))
    pairs = [
        (["approve", run.hex[:8], "--as", "alice"], ["approve", run.hex, "--as", "bob"])
        for run, _ in runs
    ]
    for (run, item), results in zip(runs, _races(tmp_path, pairs), strict=True):
        assert sorted(r.returncode for r in results) == [0, 3], [r.stderr for r in results]
        [decision] = decisions_of(read_events(shep_home), item)
        who = "alice" if results[0].returncode == 0 else "bob"
        assert decision.actor == f"user:{who}"
        lost = results[1] if who == "alice" else results[0]
        already = (
            f"shep: Item {item.hex[:8]} was already approved by user:{who} at {_when(decision)}."
        )
        assert lost.stderr.splitlines()[-1] == already, lost.stderr
        late = shep("approve", run.hex[:8], "--as", "carol")
        assert (late.returncode, late.stderr.splitlines()[-1]) == (3, already), late.stderr
