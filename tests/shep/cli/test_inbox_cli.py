"""`shep inbox`, `answer`, `approve`, `reject` as a user meets them: listings, filters,
actors, `--wait`, and one clear line on stderr with its exit code for every mistake.

The error cases use items made at the store level (``tests.support.store_items``)
on runs in this test process's hands, so no worker ever starts; the listings,
actors and resumes use real runs with real workers.
"""

from __future__ import annotations

import getpass
import json
import re
import subprocess
import sys
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from commands.answer_question import answer_question
from commands.resume_run import resume_run
from commands.suspend_run import Ask
from events.inbox import (
    ApprovalGranted,
    QuestionAnswered,
    QuestionAsked,
    QuestionOption,
    item_stream_id,
)
from events.runs import RunResumed
from events.store import EventStore
from shep.home.identity import host_name
from tests.shep.nodes.conftest import agent_log, fake_claude, repo, test_workflows
from tests.shep.nodes.test_gates import _start
from tests.support.cli import shep
from tests.support.event_log import (
    assert_rebuild_equals_incremental,
    decisions_of,
    of_type,
    read_events,
    run_state,
    run_stream,
    wait_for_status,
    wait_for_waiting,
)
from tests.support.store_items import ask_on_new_run, gate, question

# Fixtures this folder's conftest does not give (they were beside these tests before the move).
__all__ = ["agent_log", "fake_claude", "repo", "test_workflows"]

NOTICE = re.compile(r"^\d+ waiting in the inbox: shep inbox$")


@pytest.fixture(autouse=True)
def quick_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DELAY", "0.01")


def _fails(code: int, line: str, *args: str) -> None:
    """`shep ARGS` exits ``code`` with ``line`` as its only line on stderr (besides the
    inbox notice every command prints) and nothing on stdout.
    """
    result = shep(*args)
    lines = [x for x in result.stderr.splitlines() if not NOTICE.match(x)]
    assert (result.returncode, lines, result.stdout) == (code, [line], ""), result.stderr


def _inbox(*args: str) -> list[dict[str, object]]:
    listed: list[dict[str, object]] = json.loads(shep("inbox", "--json", *args, check=True).stdout)
    return listed


def test_empty_home(shep_home: Path) -> None:
    """With no store yet: `shep inbox --json` prints `[]`, `shep inbox` says it is empty, and
    deciding anything says there is nothing to decide; none of them creates the store.
    """
    listed = shep("inbox", "--json")
    assert (listed.returncode, listed.stdout, listed.stderr) == (0, "[]\n", "")
    text = shep("inbox")
    assert (text.returncode, text.stdout, text.stderr) == (0, "The inbox is empty.\n", "")
    empty = "shep: The inbox is empty: no run has asked anything."
    _fails(2, empty, "answer", "abc123", "--option", "small")
    _fails(2, empty, "approve", "abc123")
    _fails(2, empty, "reject", "abc123", "--reason", "no")
    assert not (shep_home / "shep.db").exists()


@pytest.mark.slow
def test_mistakes_get_one_line_and_an_exit_code(
    repo: Path, store: EventStore, shep_home: Path
) -> None:
    """Unknown or malformed ids, an unknown --run, ambiguous prefixes (items and runs), a
    RUN with 0 or 2 pending items, a RUN that waits for the other kind, the wrong command
    for an item's kind, an option the question lacks, an empty answer, TEXT and --option
    together or neither, a blank reason, a decided item (exit 3), an item of a cancelled
    run: each one line, its exit code, and nothing stored.
    """
    asked_run, [asked] = ask_on_new_run(store, repo, [question("q")], resumed=True)
    gated_run, [gated] = ask_on_new_run(store, repo, [gate("g")], resumed=True)
    pair_run, pair = ask_on_new_run(
        store, repo, [question("a", "ask_a"), question("b", "ask_b")], resumed=True
    )
    short = {i: i.hex[:8] for i in (asked, gated, *pair)}

    _fails(
        2,
        "shep: No inbox item or run '0123456789abcdef'. List them with `shep inbox`.",
        "answer",
        "0123456789abcdef",
        "--option",
        "small",
    )
    _fails(
        2,
        "shep: No inbox item or run 'not-an-id'. List them with `shep inbox`.",
        "approve",
        "not-an-id",
    )

    _fails(2, "shep: No run 'ffff'. List runs with `shep status --all`.", "inbox", "--run", "ffff")

    # Two items whose ids share their first three digits, and two runs sharing seven.
    twin_run = uuid4()
    seen: dict[str, str] = {}
    for n in range(100_000):
        prefix = item_stream_id(twin_run, f"twin-{n}").hex[:3]
        if prefix in seen:
            twins = [seen[prefix], f"twin-{n}"]
            break
        seen[prefix] = f"twin-{n}"
    _, twin_items = ask_on_new_run(
        store, repo, [question(twins[0]), question(twins[1])], resumed=True, run_id=twin_run
    )
    prefix = twin_items[0].hex[:3]
    assert twin_items[1].hex.startswith(prefix)
    _fails(
        2,
        f"shep: {prefix!r} matches several inbox items; type more of its id.",
        "answer",
        prefix,
        "--option",
        "small",
    )
    for tail in ("1", "2"):
        ask_on_new_run(
            store,
            repo,
            [question(f"r{tail}")],
            resumed=True,
            run_id=UUID("abcdef0" + tail * 25),
        )
    _fails(2, "shep: 'abcdef0' matches several runs; type more of its id.", "approve", "abcdef0")

    _fails(
        2,
        f"shep: Run {gated_run.hex[:8]} waits for an approval ({short[gated]}), not a "
        "question: use `shep approve` or `shep reject`.",
        "answer",
        gated_run.hex,
        "--option",
        "small",
    )
    _fails(
        2,
        f"shep: Run {pair_run.hex[:8]} waits for a question ({short[pair[0]]}), not an "
        "approval: use `shep answer`.",
        "approve",
        pair_run.hex[:8],
    )
    listed = [str(i["item_id"])[:8] for i in _inbox("--run", pair_run.hex)]
    assert sorted(listed) == sorted(short[i] for i in pair)
    _fails(
        2,
        f"shep: Run {pair_run.hex[:8]} has 2 pending question items: "
        f"{', '.join(listed)}; name one.",
        "answer",
        pair_run.hex[:8],
        "--option",
        "small",
    )

    gate_line = (
        f"shep: Item {short[gated]} is an approval gate; use `shep approve` or `shep reject`."
    )
    _fails(2, gate_line, "answer", gated.hex, "--option", "small")
    _fails(2, gate_line, "answer", short[gated], "free text")
    question_line = f"shep: Item {short[pair[0]]} is a question; use `shep answer`."
    _fails(2, question_line, "approve", pair[0].hex)
    _fails(2, question_line, "reject", pair[0].hex, "--reason", "no")
    _fails(
        2,
        f"shep: Question {short[pair[0]]} has no option 'huge'; its options are small, large.",
        "answer",
        pair[0].hex,
        "--option",
        "huge",
    )
    both = "shep: Give the answer as ANSWER, --option ID or --text TEXT (one of them)."
    _fails(2, both, "answer", pair[0].hex, "text", "--option", "small")
    _fails(2, both, "answer", pair[0].hex, "--text", "text", "--option", "small")
    _fails(2, both, "answer", pair[0].hex)
    _fails(2, "shep: The answer is empty; give text or --option ID.", "answer", pair[0].hex, "  ")
    _fails(
        2,
        "shep: A rejection needs a reason (--reason TEXT): the agent gets it.",
        "reject",
        gated.hex,
        "--reason",
        "   ",
    )

    first = shep("answer", short[asked], "--option", "small", "--as", "alice")
    assert first.returncode == 0, first.stderr
    [decision] = decisions_of(read_events(shep_home), asked)
    when = decision.timestamp.strftime("%Y-%m-%d %H:%M:%S UTC")
    decided = (
        f"shep: Item {short[asked]} was already answered 'Small: one module' by user:alice "
        f"at {when}."
    )
    _fails(3, decided, "answer", asked.hex, "--option", "large")
    _fails(3, decided, "answer", asked.hex, "other words", "--as", "bob")
    # Naming the run once its question is decided: who decided it, as for the item.
    _fails(3, decided, "answer", asked_run.hex[:8], "--option", "large")

    waiting_run, [waiting_gate] = ask_on_new_run(store, repo, [gate("c")], resumed=False)
    cancelled = shep("cancel", waiting_run.hex)
    assert cancelled.returncode == 0, cancelled.stderr
    _fails(
        2,
        f"shep: Run {waiting_run.hex[:8]} is cancelled; item {waiting_gate.hex[:8]} can no "
        "longer be decided.",
        "approve",
        waiting_gate.hex,
    )

    events = read_events(shep_home)
    assert [type(e).__name__ for e in events if e.originator_id == asked][1:] == [
        "QuestionAnswered"
    ]
    assert len(of_type(events, QuestionAnswered)) == 1
    assert of_type(events, ApprovalGranted) == []
    assert_rebuild_equals_incremental(shep_home)


def test_an_answer_that_names_an_option_is_that_option(
    repo: Path, store: EventStore, shep_home: Path
) -> None:
    """`shep answer ITEM 1` when the inbox shows `[1] Small`: option 1, as `--option 1`
    would be; a label (any case) picks its option too; `--text 1` records the free text
    "1"; other words are free text as before.
    """
    numbered = [
        QuestionOption(id="1", label="Small", recommended=True),
        QuestionOption(id="2", label="Large"),
    ]
    asks = [
        Ask(interrupt_id=n, kind="question", node=f"ask_{n}", question="Size?", options=numbered)
        for n in ("by_id", "by_label", "as_text", "free")
    ]
    run, [by_id, by_label, as_text, free] = ask_on_new_run(store, repo, asks, resumed=True)
    listed = shep("inbox", "--run", run.hex[:8], check=True).stdout
    assert "    [1] Small (recommended)" in listed

    for item, args, recorded in (
        (by_id, ["1"], ("1", "Small")),
        (by_label, ["  lArGe "], ("2", "Large")),
        (as_text, ["--text", "1"], (None, "1")),
        (free, ["something else"], (None, "something else")),
    ):
        result = shep("answer", item.hex[:8], *args)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"Answered {item.hex[:8]}: {recorded[1]}\n"
        [decision] = decisions_of(read_events(shep_home), item)
        assert (decision.option_id, decision.answer) == recorded, args


def test_reject_without_reason_is_one_line(repo: Path, store: EventStore) -> None:
    """`shep reject ITEM` with no --reason at all: exit 2 and one line on stderr naming the
    missing --reason (as every other mistake), not a usage block.
    """
    _, [gated] = ask_on_new_run(store, repo, [gate("g")], resumed=True)
    result = shep("reject", gated.hex)
    lines = [x for x in result.stderr.splitlines() if x.strip() and not NOTICE.match(x)]
    assert result.returncode == 2
    assert len(lines) == 1, result.stderr
    assert "--reason" in lines[0]


def test_items_of_a_cancelled_run_leave_the_inbox(repo: Path, store: EventStore) -> None:
    """Once its run is cancelled, an item can no longer be decided: `shep inbox` no longer
    lists it and the notice no longer counts it.
    """
    run_id, [item] = ask_on_new_run(store, repo, [gate("c")], resumed=False)
    assert [i["item_id"] for i in _inbox()] == [item.hex]
    shep("cancel", run_id.hex, check=True)
    assert _inbox() == []
    status = shep("status")
    assert not any(NOTICE.match(line) for line in status.stderr.splitlines()), status.stderr


def test_answering_an_item_of_an_interrupted_run_says_how_it_goes_on(
    repo: Path, store: EventStore, shep_home: Path
) -> None:
    """A run's worker died after it resumed for one of two questions, and the run is
    interrupted with the other still pending in the inbox: answering that one records the
    answer and either resumes the run or says, on stderr, that `shep resume RUN` continues
    it (never a bare "Answered" that leaves the user waiting on a run nobody runs).
    """
    run_id, [first, second] = ask_on_new_run(
        store, repo, [question("a", "ask_a"), question("b", "ask_b")], resumed=False
    )
    gone = subprocess.Popen(["true"])
    gone.wait()
    resume_run(store, run_id, pid=gone.pid, host=host_name(), process_start="0:0")
    answer_question(store, first, actor="user:alice", option_id="small")
    shep("status", check=True)
    assert run_state(shep_home, run_id.hex).status.value == "interrupted"
    assert [i["item_id"] for i in _inbox()] == [second.hex]

    answered = shep("answer", second.hex, "--option", "large")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == f"Answered {second.hex[:8]}: Large: the whole package\n"
    events = read_events(shep_home)
    resumed_after = len(of_type(run_stream(events, run_id.hex), RunResumed)) > 1
    assert resumed_after or f"shep resume {run_id.hex[:8]}" in answered.stderr, answered.stderr


@pytest.mark.slow
def test_filters_actors_and_resumes(
    repo: Path, fake_claude: Path, shep_home: Path, tmp_path: Path
) -> None:
    """`--repo` and `--run` filter the inbox; answering while no worker runs starts one
    (its pid is the run's new owner); `--as alice` records `user:alice`, no `--as` records
    `user:<login>`, `--as ci:bot` is kept; `--wait` resumes in the foreground and returns
    when the run waits again, or ends.
    """
    other = tmp_path / "other"
    (other / "src").mkdir(parents=True)
    (other / "src" / "lib.py").write_text("x = 1\n")
    review = _start(repo)
    pair = _start(other, "two-questions")
    [scope] = wait_for_waiting(shep_home, review, 1)
    asks = {i.node: i for i in wait_for_waiting(shep_home, pair, 2)}

    assert {i["run_id"] for i in _inbox()} == {review, pair}
    assert [i["item_id"] for i in _inbox("--repo", str(repo))] == [scope.originator_id.hex]
    assert {i["node"] for i in _inbox("--repo", f"{other}/../other")} == {"ask_a", "ask_b"}
    assert {i["node"] for i in _inbox("--run", pair[:8])} == {"ask_a", "ask_b"}
    assert _inbox("--repo", str(repo), "--run", pair) == []
    text = shep("inbox", "--run", review[:8], check=True).stdout
    assert text.splitlines()[1:] == [
        "    How large should the change be?",
        "    The draft is ready; scope decides what finish touches.",
        "    [small] Small: one module (recommended)",
        "    [large] Large: the whole package",
        f"    repo {repo}",
    ]
    assert text.startswith(f"{scope.originator_id.hex[:8]}  question  run {review[:8]}")

    answered = shep("answer", asks["ask_a"].originator_id.hex, "--option", "y", "--as", "alice")
    assert answered.returncode == 0, answered.stderr
    started = re.search(r"Started worker (\d+) in the background", answered.stderr)
    assert started, answered.stderr
    [still] = wait_for_waiting(shep_home, pair, 1)
    assert still.originator_id == asks["ask_b"].originator_id
    [resume] = of_type(run_stream(read_events(shep_home), pair), RunResumed)
    assert (resume.pid, resume.background) == (int(started.group(1)), True)
    shep("answer", asks["ask_b"].originator_id.hex[:8], "plain words", check=True)
    wait_for_status(shep_home, pair, "completed", "failed", "interrupted")
    assert (other / "answers.txt").read_text() == "a=Y\nb=plain words\n"
    events = read_events(shep_home)
    actors = {
        d.actor
        for i in (asks["ask_a"], asks["ask_b"])
        for d in decisions_of(events, i.originator_id)
    }
    assert actors == {"user:alice", f"user:{getpass.getuser()}"}

    waited = subprocess.Popen(
        [sys.executable, "-m", "shep", "answer", review[:8], "--option", "large", "--wait"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = waited.communicate(timeout=60)
    assert waited.returncode == 0, err
    assert run_state(shep_home, review).status.value == "waiting_approval"
    assert f"Run {review[:8]} is waiting for approval" in err
    [foreground] = of_type(run_stream(read_events(shep_home), review), RunResumed)
    assert (foreground.pid, foreground.background) == (waited.pid, False)

    approved = shep("approve", review[:8], "--wait", "--as", "ci:bot")
    assert approved.returncode == 0, approved.stderr
    assert run_state(shep_home, review).status.value == "completed"
    assert f"Run {review[:8]} completed." in approved.stderr
    events = read_events(shep_home)
    [granted] = of_type(events, ApprovalGranted)
    assert granted.actor == "ci:bot"
    assert len(of_type(events, QuestionAsked)) == 3
    assert _inbox() == []
