"""Items no policy covered when the supervisor first read them, decided once one does.

The supervisor reads each question and gate once, in log order, and moves its
tracking past it. An item no enabled policy covers then waits in the inbox;
once a policy covers it (enabled again, configured, a new scope), the
supervisor decides it: at its next start, or at once when it is following the
log. Exactly once, never touching what a person decided or a run that ended
meanwhile, and never skipping an item asked while it decides. Real store,
real commands, a scripted evaluator: nothing here starts a process.
"""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest

from commands.answer_question import answer_question
from commands.approve_item import approve_item
from commands.cancel_run import cancel_run
from commands.inbox_state import ItemState, append_vote, load_item
from commands.policies import set_policy_enabled
from commands.supervise import SUPERVISOR, skip
from events.base import Event
from events.inbox import ApprovalGranted, ApprovalRequested, ApprovalVoted, QuestionAsked
from events.store import EventStore
from shep.supervisor.loop import Supervisor
from shep.supervisor.start import left_to_decide
from tests.shep.supervisor.evaluators import (
    ScriptedEvaluator,
    ask,
    collaboration,
    decisions,
    feature_gate,
    policy,
    question,
    refusals,
    reply,
    tracked,
)

ANSWER = reply("answer", "the small change is enough", answer="small")
APPROVE = reply("approve", "the plan covers the request")


@pytest.fixture
def on(store: EventStore) -> EventStore:
    """The store with the ``collaboration`` flag on."""
    collaboration(store)
    return store


def repo_at(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


def supervisor(store: EventStore, evaluator: ScriptedEvaluator) -> Supervisor:
    return Supervisor(store, evaluator, resume=lambda run_id: None)


def nothing_unhandled(store: EventStore) -> bool:
    """No question, gate or vote lies after the supervisor's tracking (none was skipped)."""
    followed: list[type[Event]] = [QuestionAsked, ApprovalRequested, ApprovalVoted]
    return store.positions_of(followed, after=store.tracked_position(SUPERVISOR)) == []


def test_an_item_asked_while_no_policy_was_enabled_is_decided_once_one_is(
    on: EventStore, tmp_path: Path
) -> None:
    """The tester's story: the policy disabled, `supervisor run` reads the question and
    decides nothing; the policy enabled again, the next supervisor answers it, once."""
    policy(on, autonomy="autonomous")
    set_policy_enabled(on, "global", False, actor="test")
    run, [item] = ask(on, repo_at(tmp_path, "repo"), [question()])
    evaluator = ScriptedEvaluator([ANSWER])

    assert supervisor(on, evaluator).drain() == 1
    assert evaluator.prompts == []
    assert decisions(on, run) == []

    set_policy_enabled(on, "global", True, actor="test")
    late = supervisor(on, evaluator)
    late.drain()

    [made] = decisions(on, run)
    assert (made.subject_id, made.decision, made.answer, made.acted) == (
        item,
        "answer",
        "Small: one module",
        True,
    )
    assert _actor(on, item) == "supervisor:global@1"
    assert [(i, r.acted if r else None) for i, r in late.handled] == [(item, True)]
    assert nothing_unhandled(on)

    again = supervisor(on, evaluator)
    assert again.drain() == 0
    assert again.handled == []
    assert len(decisions(on, run)) == 1
    assert len(evaluator.prompts) == 1


def test_a_following_supervisor_decides_another_repositorys_item_once_its_scope_is_set(
    on: EventStore, tmp_path: Path
) -> None:
    """`supervisor run --follow` with only repo A's policy: repo B's gate is left; setting
    B's policy makes the same, still running supervisor decide it (and A's items go on)."""
    first, second = repo_at(tmp_path, "a"), repo_at(tmp_path, "b")
    policy(on, f"repo:{first}", "autonomous")
    follower = supervisor(on, ScriptedEvaluator([APPROVE]))
    run_a, [gate_a] = ask(on, first, [feature_gate("plan")])
    run_b, [gate_b] = ask(on, second, [feature_gate("plan")])

    follower.drain()
    assert [m.subject_id for m in decisions(on, run_a)] == [gate_a]
    assert decisions(on, run_b) == []
    assert follower.drain() == 0  # nothing changed: nothing read again

    policy(on, f"repo:{second}", "autonomous")
    assert follower.drain() == 1

    [made] = decisions(on, run_b)
    assert (made.subject_id, made.policy_version, made.acted) == (gate_b, f"repo:{second}@1", True)
    assert isinstance(_decision(on, gate_b), ApprovalGranted)
    assert follower.drain() == 0
    assert [len(decisions(on, run_a)), len(decisions(on, run_b))] == [1, 1]
    assert nothing_unhandled(on)


def test_an_item_a_person_decided_meanwhile_is_not_touched(on: EventStore, tmp_path: Path) -> None:
    """Answered by a person while no policy covered it: enabling one records nothing on it."""
    policy(on, autonomy="autonomous")
    set_policy_enabled(on, "global", False, actor="test")
    run, [item] = ask(on, repo_at(tmp_path, "repo"), [question()])
    evaluator = ScriptedEvaluator([ANSWER])
    supervisor(on, evaluator).drain()
    answer_question(on, item, actor="alice", option_id="large")

    set_policy_enabled(on, "global", True, actor="test")
    before = on.max_position()
    late = supervisor(on, evaluator)
    assert late.drain() == 0

    assert on.max_position() == before
    assert evaluator.prompts == []
    assert (decisions(on, run), refusals(on, run), late.handled) == ([], [], [])
    assert _actor(on, item) == "alice"


def test_a_late_item_a_person_decides_while_another_is_evaluated_is_not_touched(
    on: EventStore, tmp_path: Path
) -> None:
    """Two items left; while the first is evaluated, a person answers the second: the
    supervisor neither asks its evaluator about it nor records a refusal."""
    policy(on, autonomy="autonomous")
    set_policy_enabled(on, "global", False, actor="test")
    run, [first, second] = ask(on, repo_at(tmp_path, "repo"), [question("q1"), question("q2")])
    supervisor(on, ScriptedEvaluator([ANSWER])).drain()
    set_policy_enabled(on, "global", True, actor="test")

    def a_person_answers(item: object) -> None:
        assert isinstance(item, ItemState)
        if item.item_id == first:
            answer_question(on, second, actor="alice", option_id="large")

    evaluator = ScriptedEvaluator([ANSWER])
    sup = Supervisor(on, evaluator, before_evaluate=a_person_answers)
    sup.drain()

    assert [item for item, _ in sup.handled] == [first]
    assert len(evaluator.prompts) == 1
    assert [m.subject_id for m in decisions(on, run)] == [first]
    assert refusals(on, run) == []
    assert (_actor(on, first), _actor(on, second)) == ("supervisor:global@1", "alice")


def test_an_item_of_a_run_that_ended_meanwhile_is_not_touched(
    on: EventStore, tmp_path: Path
) -> None:
    """The run was cancelled while its question waited uncovered: nothing to decide later."""
    policy(on, autonomy="autonomous")
    set_policy_enabled(on, "global", False, actor="test")
    run, [item] = ask(on, repo_at(tmp_path, "repo"), [question()])
    evaluator = ScriptedEvaluator([ANSWER])
    supervisor(on, evaluator).drain()
    cancel_run(on, run, cancelled_by="alice")

    set_policy_enabled(on, "global", True, actor="test")
    assert left_to_decide(on, [item]) == []
    assert supervisor(on, evaluator).drain() == 0
    assert evaluator.prompts == []
    assert decisions(on, run) == []


def test_an_item_the_supervisor_decided_on_is_not_decided_again_under_a_new_policy(
    on: EventStore, tmp_path: Path
) -> None:
    """An escalated gate waits for a person: a new policy version does not reopen it, and
    it does not count as waiting for the supervisor."""
    policy(on, autonomy="autonomous")
    run, [item] = ask(on, repo_at(tmp_path, "repo"), [feature_gate("plan")])
    evaluator = ScriptedEvaluator([reply("escalate", "a person should look"), APPROVE])
    supervisor(on, evaluator).drain()
    assert [m.decision for m in decisions(on, run)] == ["escalate"]

    policy(on, autonomy="cosign")
    assert left_to_decide(on, [item]) == []
    assert supervisor(on, evaluator).drain() == 0
    assert [m.decision for m in decisions(on, run)] == ["escalate"]
    assert len(evaluator.prompts) == 1


def test_an_item_asked_while_a_late_one_is_decided_is_still_decided(
    on: EventStore, tmp_path: Path
) -> None:
    """A run asks while the supervisor decides a late item: the late decision's tracking
    does not pass over the new question; it is read and decided too."""
    repo = repo_at(tmp_path, "repo")
    policy(on, autonomy="autonomous")
    set_policy_enabled(on, "global", False, actor="test")
    _, [late_item] = ask(on, repo, [feature_gate("plan")])
    supervisor(on, ScriptedEvaluator([APPROVE])).drain()
    set_policy_enabled(on, "global", True, actor="test")
    asked_meanwhile: list[UUID] = []

    def a_run_asks(item: object) -> None:
        if not asked_meanwhile:
            asked_meanwhile.extend(ask(on, repo, [question()])[1])

    sup = Supervisor(
        on,
        ScriptedEvaluator([APPROVE, ANSWER]),
        resume=lambda run_id: None,
        before_evaluate=a_run_asks,
    )
    sup.drain()

    [new_item] = asked_meanwhile
    assert [item for item, _ in sup.handled] == [late_item, new_item]
    assert all(recorded is not None and recorded.acted for _, recorded in sup.handled)
    assert nothing_unhandled(on)


def test_a_vote_cast_while_no_cosign_policy_covered_the_gate_is_co_signed_later(
    on: EventStore, tmp_path: Path
) -> None:
    """A person's vote waited on a gate no policy covered; once a cosign policy covers it,
    the supervisor's approval opens the gate, co-signed by that person."""
    policy(on, autonomy="cosign")
    set_policy_enabled(on, "global", False, actor="test")
    run, [item] = ask(on, repo_at(tmp_path, "repo"), [feature_gate("merge")])
    append_vote(on, item, actor="alice", rationale="ship it", policy="global@1")
    supervisor(on, ScriptedEvaluator([APPROVE])).drain()
    assert _decision(on, item) is None

    set_policy_enabled(on, "global", True, actor="test")
    supervisor(on, ScriptedEvaluator([APPROVE])).drain()

    granted = _decision(on, item)
    assert isinstance(granted, ApprovalGranted)
    assert (granted.actor, granted.cosigned_by) == ("supervisor:global@1", "alice")
    assert [m.acted for m in decisions(on, run)] == [True]
    assert nothing_unhandled(on)


def test_left_to_decide_counts_only_what_the_supervisor_will_decide(
    on: EventStore, tmp_path: Path
) -> None:
    """What `enable`, `configure` and the flag report as started for: covered, undecided,
    on a live run, with nothing of the supervisor's on it yet; in the given order."""
    first, second = repo_at(tmp_path, "a"), repo_at(tmp_path, "b")
    policy(on, f"repo:{first}", "autonomous")
    _, [escalated, answered] = ask(on, first, [question("q1"), feature_gate("plan")])
    _, [elsewhere] = ask(on, second, [question()])
    supervisor(on, ScriptedEvaluator([reply("escalate", "a person should look")])).drain()
    approve_item(on, answered, actor="alice")
    _, [fresh, other] = ask(on, first, [question("q1"), question("q2")])

    assert left_to_decide(on, [elsewhere, other, escalated, answered, fresh]) == [other, fresh]
    assert left_to_decide(on, []) == []


def test_late_items_are_tracked_between_the_positions_already_handled_and_a_vote_not_read(
    on: EventStore, tmp_path: Path
) -> None:
    """The policy enabled, then a person votes on one of two items passed over: the late
    decisions are tracked around the vote, which is read (not passed over), and the gate
    opens co-signed by the voter."""
    repo = repo_at(tmp_path, "repo")
    policy(on, autonomy="cosign")
    set_policy_enabled(on, "global", False, actor="test")
    first, [asked] = ask(on, repo, [question()])
    _, [merge] = ask(on, repo, [feature_gate("merge")])
    supervisor(on, ScriptedEvaluator([APPROVE])).drain()
    set_policy_enabled(on, "global", True, actor="test")
    enabled_at = on.max_position()
    append_vote(on, merge, actor="alice", rationale="ship it", policy="global@1")
    vote_at = on.max_position()

    sup = supervisor(on, ScriptedEvaluator([ANSWER, APPROVE]))
    sup.drain()

    assert [item for item, _ in sup.handled] == [asked, merge]
    [advice] = decisions(on, first)
    assert (advice.decision, advice.acted) == ("answer", False)  # cosign: a question is advised
    granted = _decision(on, merge)
    assert isinstance(granted, ApprovalGranted)
    assert (granted.actor, granted.cosigned_by) == ("supervisor:global@1", "alice")
    assert enabled_at < vote_at < tracked(on)
    assert nothing_unhandled(on)


def test_a_late_item_waits_for_a_position_to_be_tracked_at_without_a_busy_loop(
    on: EventStore, tmp_path: Path
) -> None:
    """As a supervisor that never came back to items left them: two items passed over, the
    policy enabled, then the newest event (a vote) tracked. No free position: drain returns
    at once, deciding nothing; the next event in the log gives one, and both are decided."""
    repo = repo_at(tmp_path, "repo")
    policy(on, autonomy="autonomous")
    set_policy_enabled(on, "global", False, actor="test")
    run, [asked] = ask(on, repo, [question()])
    _, [merge] = ask(on, repo, [feature_gate("merge")])
    supervisor(on, ScriptedEvaluator()).drain()
    set_policy_enabled(on, "global", True, actor="test")
    append_vote(on, merge, actor="alice", rationale="ship it", policy="global@1")
    skip(on, on.max_position())  # the vote read without going back to the items first
    evaluator = ScriptedEvaluator([ANSWER, APPROVE])

    assert supervisor(on, evaluator).drain() == 0
    assert evaluator.prompts == []

    collaboration(on)  # any event: a position to track the question at
    sup = supervisor(on, evaluator)
    sup.drain()
    assert [item for item, _ in sup.handled] == [asked, merge]
    assert [m.subject_id for m in decisions(on, run)] == [asked]
    assert nothing_unhandled(on)


def _decision(store: EventStore, item: UUID) -> object:
    state = load_item(store, item)
    assert state is not None
    return state.decision


def _actor(store: EventStore, item: UUID) -> str | None:
    """Who decided the item (None: still open)."""
    state = load_item(store, item)
    assert state is not None
    return state.decision.actor if state.decision is not None else None
