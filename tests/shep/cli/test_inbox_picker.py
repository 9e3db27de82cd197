"""The interactive inbox: real runs wait in the inbox, the picker is driven through a pipe.

Runs are started with the real CLI (background workers that exit while the run
waits); the picker runs in this process on the same SHEP_HOME, with its keys
sent through prompt-toolkit's pipe input. The pipe is closed after the keys, so
a picker that wants more input than a test gives ends (as Ctrl-D) instead of
hanging. Assertions read the item streams in the log and the runs' progress.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from commands.inbox_state import ItemState, load_item
from events.base import Event
from events.inbox import ApprovalGranted, ApprovalRejected, QuestionAnswered
from projections.catch_up import catch_up
from projections.inbox_queries import list_inbox
from shep.home.identity import user_actor
from shep.home.runtime import Runtime
from tests.shep.nodes.conftest import agent_log, fake_claude, repo, test_workflows
from tests.shep.runs.conftest import agent_calls
from tests.shep.runs.test_background_recovery import run_row, wait_for
from tests.support.cli import shep

# Fixtures this folder's conftest does not give (they were beside these tests before the move).
__all__ = ["agent_log", "fake_claude", "repo", "test_workflows"]

Row = dict[str, object]

# Every run needs a configured agent, even one that only asks questions.
pytestmark = pytest.mark.usefixtures("fake_claude")

DOWN = "\x1b[B"
LEFT = "\x1b[D"


@pytest.fixture
def runtime(shep_home: Path) -> Iterator[Runtime]:
    """The runtime the CLI would build on this SHEP_HOME, for calling the picker in-process."""
    handle = Runtime(shep_home)
    yield handle
    handle.close()


def _start(repo: Path, workflow: str) -> str:
    result = shep("run", workflow, "--repo", str(repo), "--background", check=True)
    return result.stdout.strip()


def _pending(runtime: Runtime, run_id: str | None = None) -> list[Row]:
    conn = runtime.read_db()
    catch_up(conn)
    return list_inbox(conn, run_id=run_id)


def _wait_pending(runtime: Runtime, run_id: str, kinds: list[str]) -> list[Row]:
    """Wait until the run waits (no worker) on pending items of exactly these kinds."""
    wait_for(
        lambda: (
            sorted(str(i["kind"]) for i in _pending(runtime, run_id)) == sorted(kinds)
            and str(run_row(run_id)["status"]).startswith("waiting")
        ),
        what=f"run {run_id[:8]} to wait on {kinds}",
    )
    return _pending(runtime, run_id)


def _at_gate(runtime: Runtime, repo: Path) -> tuple[str, Row]:
    """A gated-review run at its approval gate (its question answered through the CLI)."""
    run_id = _start(repo, "gated-review")
    (question,) = _wait_pending(runtime, run_id, ["question"])
    shep("answer", str(question["item_id"]), "--option", "small", check=True)
    (gate,) = _wait_pending(runtime, run_id, ["approval"])
    return run_id, gate


def _pick(runtime: Runtime, keys: str, items: list[Row] | None = None) -> None:
    """Run the picker on ``items`` (default: the inbox now) with ``keys`` typed ahead."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from shep.cli.inbox_picker import pick_and_decide

    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        pipe.close()
        pick_and_decide(
            runtime,
            _pending(runtime) if items is None else items,
            input=pipe,
            output=DummyOutput(),
        )


def _stream(runtime: Runtime, item: Row) -> list[Event]:
    return runtime.store().load(UUID(str(item["item_id"])))


def _state(runtime: Runtime, item: Row) -> ItemState:
    state = load_item(runtime.store(), UUID(str(item["item_id"])))
    assert state is not None
    return state


@pytest.mark.slow
def test_enter_answers_with_the_preselected_recommended_option(
    runtime: Runtime,
    repo: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Enter opens the item, Enter takes the recommended option (preselected), Enter confirms:
    the answer is one event by the user, one line says so, and the run goes on to its gate.
    """
    run_id = _start(repo, "gated-review")
    (question,) = _wait_pending(runtime, run_id, ["question"])

    _pick(runtime, "\r\r\r")

    events = _stream(runtime, question)
    assert len(events) == 2
    answer = events[1]
    assert isinstance(answer, QuestionAnswered)
    assert (answer.option_id, answer.answer, answer.actor) == (
        "small",
        "Small: one module",
        user_actor(),
    )
    out = capsys.readouterr().out
    assert f"Answered {str(question['item_id'])[:8]}: Small: one module" in out
    _wait_pending(runtime, run_id, ["approval"])
    assert "Scope: Small: one module" in (repo / "shep-review.md").read_text()


@pytest.mark.slow
def test_moves_with_j_k_and_arrows_to_another_item_and_option(
    runtime: Runtime, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """j/k move in the list (stopping at its ends), the down arrow moves among the options:
    the second item is answered with its second option; the first stays pending.
    """
    run_id = _start(repo, "two-questions")
    first, second = _wait_pending(runtime, run_id, ["question", "question"])

    _pick(runtime, "jjkj\r" + DOWN + "\r" + "y\r")

    assert _state(runtime, first).decision is None
    decision = _state(runtime, second).decision
    assert isinstance(decision, QuestionAnswered)
    assert (decision.option_id, decision.answer) == ("y", "Y")
    assert [i["item_id"] for i in _pending(runtime, run_id)] == [first["item_id"]]
    assert f"Answered {str(second['item_id'])[:8]}: Y" in capsys.readouterr().out
    _wait_pending(runtime, run_id, ["question"])  # resumed with the answer, waits on the other


@pytest.mark.slow
def test_answers_with_free_text_and_refuses_an_empty_one(runtime: Runtime, repo: Path) -> None:
    """ "Type an answer..." (after the options) takes free text; an empty one is asked again;
    the text is recorded with no option, and the run uses it.
    """
    run_id = _start(repo, "gated-review")
    (question,) = _wait_pending(runtime, run_id, ["question"])

    _pick(runtime, "\r" + "jj\r" + "\r" + "  \r" + "\x7f\x7fOnly the parser\r" + "\r")

    decision = _state(runtime, question).decision
    assert isinstance(decision, QuestionAnswered)
    assert (decision.option_id, decision.answer) == (None, "Only the parser")
    _wait_pending(runtime, run_id, ["approval"])
    assert "Scope: Only the parser" in (repo / "shep-review.md").read_text()


@pytest.mark.slow
def test_approves_a_gate_with_a_comment(
    runtime: Runtime,
    repo: Path,
    agent_log: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Approve is preselected; the comment is recorded as the approval's rationale; the run
    resumes and completes (finish runs).
    """
    run_id, gate = _at_gate(runtime, repo)

    _pick(runtime, "\r" + "\r" + "ship it\r" + "y\r")

    events = _stream(runtime, gate)
    assert len(events) == 2
    approval = events[1]
    assert isinstance(approval, ApprovalGranted)
    assert (approval.rationale, approval.actor) == ("ship it", user_actor())
    assert f"Approved {str(gate['item_id'])[:8]} (approve of run {run_id[:8]})." in (
        capsys.readouterr().out
    )
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")
    assert [c["node"] for c in agent_calls(agent_log) if c["phase"] == "done"] == [
        "draft",
        "finish",
    ]


@pytest.mark.slow
def test_rejects_a_gate_with_a_reason_after_refusing_an_empty_one(
    runtime: Runtime,
    repo: Path,
    agent_log: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Reject asks for a reason and refuses an empty one; the rejection carries the reason,
    the draft phase re-runs with it in the agent's prompt, and the gate is asked again.
    """
    run_id, gate = _at_gate(runtime, repo)

    _pick(runtime, "\r" + "j\r" + "\r" + "   \r" + "\x7f" * 3 + "Add tests first\r" + "y\r")

    decision = _state(runtime, gate).decision
    assert isinstance(decision, ApprovalRejected)
    assert (decision.rationale, decision.actor) == ("Add tests first", user_actor())
    assert f"Rejected {str(gate['item_id'])[:8]}: draft of run {run_id[:8]} runs again" in (
        capsys.readouterr().out
    )
    (again,) = _wait_pending(runtime, run_id, ["approval"])
    assert again["item_id"] != gate["item_id"]
    assert again["iteration"] == 2
    drafts = [c for c in agent_calls(agent_log) if c["node"] == "draft" and c["phase"] == "start"]
    assert len(drafts) == 2
    assert "Add tests first" in drafts[1]["prompt"]


@pytest.mark.slow
def test_an_empty_reason_never_rejects(
    runtime: Runtime, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Enter on an empty (or blank) reason is refused: the picker keeps asking, and leaving
    there records nothing; the gate stays pending and the run keeps waiting.
    """
    run_id, gate = _at_gate(runtime, repo)

    _pick(runtime, "\r" + "j\r" + "\r" + "   \r")

    assert len(_stream(runtime, gate)) == 1
    assert [i["item_id"] for i in _pending(runtime, run_id)] == [gate["item_id"]]
    assert run_row(run_id)["status"] == "waiting_approval"
    assert "Rejected" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "keys",
    [
        pytest.param("q\r\r\r", id="q-in-list"),
        pytest.param("\x03\r\r\r", id="ctrl-c-in-list"),
        pytest.param("\x04\r\r\r", id="ctrl-d-in-list"),
        pytest.param("\rq\r\r", id="q-in-options"),
        pytest.param("\r" + DOWN * 2 + "\rabc\x03\r\r", id="ctrl-c-typing-an-answer"),
        pytest.param("\r\r\x04\r\r", id="ctrl-d-at-confirmation"),
    ],
)
def test_quits_cleanly_at_once(
    keys: str, runtime: Runtime, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """q, Ctrl-C and Ctrl-D quit from the list, an item's menu or a prompt: the picker returns
    normally, the keys typed after it are not taken as answers, nothing is recorded.
    """
    run_id = _start(repo, "two-questions")
    items = _wait_pending(runtime, run_id, ["question", "question"])

    _pick(runtime, keys)

    assert [len(_stream(runtime, item)) for item in items] == [1, 1]
    assert len(_pending(runtime, run_id)) == 2
    out = capsys.readouterr().out
    assert "Answered" not in out
    assert "The inbox is empty." not in out


def test_going_back_or_declining_records_nothing(
    runtime: Runtime, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Left goes back from an item to the list; n at the confirmation records nothing and
    says so; the list comes back each time.
    """
    run_id = _start(repo, "two-questions")
    items = _wait_pending(runtime, run_id, ["question", "question"])

    _pick(runtime, "\r" + LEFT + "\r\r" + "n\r" + "\r" + "jjj\r" + "q")

    assert [len(_stream(runtime, item)) for item in items] == [1, 1]
    assert capsys.readouterr().out.count("Nothing recorded.") == 1


@pytest.mark.slow
def test_decides_until_the_inbox_is_empty(
    runtime: Runtime, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After each decision the list is read again; when nothing is left the picker says the
    inbox is empty and returns; both answers reach the run, which completes.
    """
    run_id = _start(repo, "two-questions")
    first, second = _wait_pending(runtime, run_id, ["question", "question"])

    _pick(runtime, "\r\r\r" + "\r" + DOWN + "\r\r")

    answers = [_state(runtime, item).decision for item in (first, second)]
    assert [a.option_id for a in answers if isinstance(a, QuestionAnswered)] == ["x", "y"]
    assert capsys.readouterr().out.endswith("The inbox is empty.\n")
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")
    by_node = {str(first["node"]): "X", str(second["node"]): "Y"}
    assert (repo / "answers.txt").read_text() == (f"a={by_node['ask_a']}\nb={by_node['ask_b']}\n")


@pytest.mark.slow
def test_a_decision_that_lost_the_race_is_said_and_the_picker_goes_on(
    runtime: Runtime, repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An item answered by another process while the picker showed it: the picker's answer is
    refused with the one-line "already answered" message, the other answer stands alone in
    the log, and the picker goes on with the refreshed list (the other item).
    """
    run_id = _start(repo, "two-questions")
    items = _wait_pending(runtime, run_id, ["question", "question"])
    first, second = items
    shep("answer", str(first["item_id"]), "--option", "y", "--as", "rival", check=True)

    _pick(runtime, "\r\r\r" + "\r\r\r", items=items)

    events = _stream(runtime, first)
    assert len(events) == 2
    assert isinstance(events[1], QuestionAnswered)
    assert (events[1].actor, events[1].answer) == ("user:rival", "Y")
    mine = _state(runtime, second).decision
    assert isinstance(mine, QuestionAnswered)
    assert (mine.actor, mine.option_id) == (user_actor(), "x")
    captured = capsys.readouterr()
    assert f"Item {str(first['item_id'])[:8]} was already answered 'Y' by user:rival" in (
        captured.err
    )
    assert captured.out.endswith("The inbox is empty.\n")
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")
