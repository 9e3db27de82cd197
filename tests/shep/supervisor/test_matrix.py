"""The supervisor's decision matrix, on a real store with the real commands.

Each autonomy (advisory, cosign, autonomous) on each item kind (the feature
workflow's prd, plan and merge gates, and a question): what it records, and
whether the item got decided. Then cosign's two signatures in both orders,
the user winning over the supervisor (before and after it decides), the
evaluator failing, and the flag being off. The evaluator is scripted
(``tests.shep.supervisor.evaluators``): nothing here starts a process.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
import pytest

from commands.answer_question import answer_question
from commands.approve_item import approve_item
from commands.cancel_run import cancel_run
from commands.create_run import create_run
from commands.inbox_state import Decision, ItemState, append_vote, load_item
from commands.policies import set_policy_enabled
from commands.reject_item import reject_item
from commands.resume_run import resume_run
from commands.run_state import load_run
from commands.start_run import start_run
from commands.supervise import SUPERVISOR
from commands.suspend_run import suspend_run
from events.base import utc_now
from events.errors import AgentTimeoutError, AlreadyDecidedError, SupervisorOffError
from events.inbox import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    ApprovalVoted,
    QuestionAnswered,
    QuestionAsked,
    item_stream_id,
)
from events.store import EventStore
from events.supervisor import SupervisorDecisionMade
from shep.home.identity import host_name
from shep.home.procs import process_start
from shep.supervisor.loop import Supervisor
from shep.supervisor.prompt import PROMPT_VERSION
from tests.shep.supervisor.evaluators import (
    ScriptedEvaluator,
    ask,
    collaboration,
    decisions,
    feature_gate,
    item_ask,
    last_followed,
    policy,
    question,
    refusals,
    reply,
    tracked,
)

KINDS = ("prd", "plan", "merge", "question")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    return path


@pytest.fixture
def on(store: EventStore) -> EventStore:
    """The store with the ``collaboration`` flag on."""
    collaboration(store)
    return store


def approving(kind: str) -> ScriptedEvaluator:
    """An evaluator that says yes: approves a gate, answers a question with its first option."""
    if kind == "question":
        return ScriptedEvaluator([reply("answer", "the small change is enough", answer="small")])
    return ScriptedEvaluator([reply("approve", "the plan covers the request")])


def decided(store: EventStore, item: UUID) -> Decision | None:
    """The item's decision as the commands see it (None: still open)."""
    state = load_item(store, item)
    assert state is not None, "the item exists"
    return state.decision


def drain(
    store: EventStore,
    evaluator: ScriptedEvaluator,
    before_evaluate: Callable[[ItemState], None] | None = None,
) -> list[UUID]:
    """Run the supervisor over everything not handled yet; the runs it would resume.

    ``before_evaluate`` runs just before the evaluator is asked (a user acting meanwhile).
    """
    resumed: list[UUID] = []
    hook: Any = before_evaluate
    Supervisor(store, evaluator, resume=resumed.append, before_evaluate=hook).drain()
    return resumed


# --- autonomy x item kind -----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_advisory_records_advice_and_decides_nothing(on: EventStore, repo: Path, kind: str) -> None:
    """Advisory: the evaluator's yes is recorded as advice; the item stays with the user."""
    policy(on, autonomy="advisory")
    evaluator = approving(kind)
    run, [item] = ask(on, repo, [item_ask(kind)])

    assert drain(on, evaluator) == []

    [made] = decisions(on, run)
    assert (made.decision, made.acted, made.cosign_pending) == ("advise", False, False)
    assert made.advice == ("answer" if kind == "question" else "approve")
    assert (made.autonomy, made.item_kind, made.subject_id) == ("advisory", kind, item)
    assert (made.policy, made.policy_version) == ("global", "global@1")
    assert (made.prompt_version, made.evaluator_agent) == (PROMPT_VERSION, "scripted")
    assert len(made.input_hash) == 64
    assert made.confidence == 0.9
    if kind == "question":
        assert (made.answer, made.option_id) == ("Small: one module", "small")
    assert decided(on, item) is None
    assert len(evaluator.prompts) == 1
    assert tracked(on) == last_followed(on)


@pytest.mark.parametrize(
    ("said", "advice"), [("reject", "reject"), ("advise", None), ("escalate", None)]
)
def test_advisory_records_what_the_evaluator_would_do(
    on: EventStore, repo: Path, said: str, advice: str | None
) -> None:
    """A rejection is advice to reject; a bare ``advise`` (rationale only) and an
    escalation are recorded as they are. Nothing is decided."""
    policy(on, autonomy="advisory")
    run, [item] = ask(on, repo, [feature_gate("plan")])

    drain(on, ScriptedEvaluator([reply(said, "the plan misses the migration")]))

    [made] = decisions(on, run)
    expected = "escalate" if said == "escalate" else "advise"
    assert (made.decision, made.advice, made.acted) == (expected, advice, False)
    assert made.rationale == "the plan misses the migration"
    assert decided(on, item) is None


@pytest.mark.parametrize("kind", ["prd", "plan", "merge"])
def test_cosign_approval_of_a_gate_waits_for_a_user(on: EventStore, repo: Path, kind: str) -> None:
    """Cosign: the supervisor's approval is one signature; the gate stays open for the user's."""
    policy(on, autonomy="cosign")
    run, [item] = ask(on, repo, [feature_gate(kind)])

    assert drain(on, approving(kind)) == []

    [made] = decisions(on, run)
    assert (made.decision, made.acted, made.cosign_pending) == ("approve", False, True)
    assert (made.autonomy, made.item_kind, made.policy_version) == ("cosign", kind, "global@1")
    assert made.advice is None
    assert decided(on, item) is None
    assert tracked(on) == last_followed(on)


def test_cosign_answer_to_a_question_is_only_recorded(on: EventStore, repo: Path) -> None:
    """Cosign signs gates: its answer to a question is recorded, not given, and not pending."""
    policy(on, autonomy="cosign")
    run, [item] = ask(on, repo, [question()])

    assert drain(on, approving("question")) == []

    [made] = decisions(on, run)
    assert (made.decision, made.acted, made.cosign_pending) == ("answer", False, False)
    assert (made.answer, made.option_id) == ("Small: one module", "small")
    assert decided(on, item) is None


@pytest.mark.parametrize("kind", ["prd", "plan", "merge"])
def test_autonomous_approval_decides_the_gate(on: EventStore, repo: Path, kind: str) -> None:
    """Autonomous: the approval is the gate's decision, by ``supervisor:global@1``; the run
    is handed to ``resume``."""
    policy(on, autonomy="autonomous", model="judge-1", timeout=42)
    evaluator = approving(kind)
    run, [item] = ask(on, repo, [feature_gate(kind)])

    assert drain(on, evaluator) == [run]

    [made] = decisions(on, run)
    assert (made.decision, made.acted, made.cosign_pending) == ("approve", True, False)
    assert (made.autonomy, made.item_kind, made.model) == ("autonomous", kind, "judge-1")
    assert made.rationale == "the plan covers the request"
    state = decided(on, item)
    assert isinstance(state, ApprovalGranted)
    granted = state
    assert (granted.actor, granted.policy) == ("supervisor:global@1", "global@1")
    assert (granted.rationale, granted.cosigned_by, granted.overrides) == (
        "the plan covers the request",
        None,
        None,
    )
    assert evaluator.calls == [("judge-1", 42.0)]
    assert tracked(on) == last_followed(on)


def test_autonomous_answer_decides_the_question(on: EventStore, repo: Path) -> None:
    """Autonomous: the evaluator's option becomes the question's answer (its label and id)."""
    policy(on, autonomy="autonomous")
    run, [item] = ask(on, repo, [question()])

    assert drain(on, approving("question")) == [run]

    [made] = decisions(on, run)
    assert (made.decision, made.acted, made.item_kind) == ("answer", True, "question")
    state = decided(on, item)
    assert isinstance(state, QuestionAnswered)
    answered = state
    assert (answered.actor, answered.answer, answered.option_id) == (
        "supervisor:global@1",
        "Small: one module",
        "small",
    )
    assert tracked(on) == last_followed(on)


def test_autonomous_rejection_rejects_the_gate(on: EventStore, repo: Path) -> None:
    """Autonomous: a rejection is the gate's decision, its rationale the reason given back."""
    policy(on, autonomy="autonomous")
    run, [item] = ask(on, repo, [feature_gate("plan")])

    assert drain(on, ScriptedEvaluator([reply("reject", "the plan skips the migration")])) == [run]

    [made] = decisions(on, run)
    assert (made.decision, made.acted) == ("reject", True)
    state = decided(on, item)
    assert isinstance(state, ApprovalRejected)
    assert (state.actor, state.rationale) == (
        "supervisor:global@1",
        "the plan skips the migration",
    )


@pytest.mark.parametrize("autonomy", ["advisory", "cosign", "autonomous"])
def test_an_escalation_decides_nothing_at_any_autonomy(
    on: EventStore, repo: Path, autonomy: str
) -> None:
    """The evaluator's escalation is recorded as it is; the item waits for a person."""
    policy(on, autonomy=autonomy)
    run, [gate_id, question_id] = ask(on, repo, [feature_gate("merge"), question()])

    assert drain(on, ScriptedEvaluator([reply("escalate", "this needs a human")])) == []

    made = decisions(on, run)
    assert [(m.subject_id, m.decision, m.acted, m.cosign_pending) for m in made] == [
        (gate_id, "escalate", False, False),
        (question_id, "escalate", False, False),
    ]
    for item in (gate_id, question_id):
        assert decided(on, item) is None


# --- overrides per kind, scopes -----------------------------------------------------------


def test_a_kind_override_changes_the_autonomy_of_that_kind_only(on: EventStore, repo: Path) -> None:
    """Advisory with merge=autonomous: the merge gate is approved, the plan gate advised on."""
    policy(on, autonomy="advisory", overrides={"merge": "autonomous"})
    run, [plan, merge] = ask(on, repo, [feature_gate("plan"), feature_gate("merge")])

    drain(on, approving("plan"))

    made = {m.subject_id: m for m in decisions(on, run)}
    assert (made[plan].autonomy, made[plan].decision, made[plan].acted) == (
        "advisory",
        "advise",
        False,
    )
    assert (made[merge].autonomy, made[merge].decision, made[merge].acted) == (
        "autonomous",
        "approve",
        True,
    )
    assert decided(on, plan) is None
    assert isinstance(decided(on, merge), ApprovalGranted)


def test_the_most_specific_enabled_scope_decides(on: EventStore, repo: Path) -> None:
    """run > repo > global; a disabled policy lets the next one apply; none: skipped."""
    policy(on, "global", "autonomous")
    policy(on, f"repo:{repo}", "cosign")
    policy(on, f"repo:{repo}", "advisory")  # the repo's version 2 replaces version 1
    first, _ = ask(on, repo, [feature_gate("plan")], run_id=UUID(int=1))
    policy(on, f"run:{first.hex}", "cosign")
    other = repo.parent / "other"
    other.mkdir()
    elsewhere, _ = ask(on, other, [feature_gate("plan")], run_id=UUID(int=2))

    drain(on, approving("plan"))
    assert [m.policy_version for m in decisions(on, first)] == [f"run:{first.hex}@1"]
    assert [m.policy_version for m in decisions(on, elsewhere)] == ["global@1"]

    def second_item(run_id: int) -> list[SupervisorDecisionMade]:
        """A new item on the first run, drained; the decisions on it."""
        _, [item] = ask(on, repo, [feature_gate("plan")], run_id=UUID(int=run_id))
        drain(on, approving("plan"))
        return [m for m in decisions(on, UUID(int=run_id)) if m.subject_id == item]

    set_policy_enabled(on, f"run:{first.hex}", False, actor="test")
    assert [(m.policy, m.policy_version, m.autonomy) for m in second_item(3)] == [
        (f"repo:{repo}", f"repo:{repo}@2", "advisory")
    ]
    set_policy_enabled(on, f"repo:{repo}", False, actor="test")
    assert [(m.policy_version, m.autonomy) for m in second_item(4)] == [("global@1", "autonomous")]
    set_policy_enabled(on, "global", False, actor="test")
    assert second_item(5) == []
    set_policy_enabled(on, f"repo:{repo}", True, actor="test")
    assert [m.policy_version for m in second_item(6)] == [f"repo:{repo}@2"]
    assert tracked(on) == last_followed(on)


def test_an_item_no_policy_covers_is_skipped(on: EventStore, repo: Path) -> None:
    """No policy: nothing is recorded, the evaluator is not asked, the tracking moves on."""
    evaluator = approving("plan")
    run, _ = ask(on, repo, [feature_gate("plan")])
    before = on.max_position()

    drain(on, evaluator)

    assert evaluator.prompts == []
    assert on.max_position() == before
    assert decisions(on, run) == []
    assert tracked(on) == last_followed(on)


# --- cosign: two signatures, in both orders --------------------------------------------------


def test_cosign_supervisor_first_then_the_user_closes_the_gate(on: EventStore, repo: Path) -> None:
    """The supervisor approves (pending); the user's approval closes the gate, co-signed."""
    policy(on, autonomy="cosign")
    run, [item] = ask(on, repo, [feature_gate("merge")])
    drain(on, approving("merge"))
    assert decided(on, item) is None

    approve_item(on, item, actor="alice", comment="ship it", cosign="global@1")

    state = decided(on, item)
    assert isinstance(state, ApprovalGranted)
    assert (state.actor, state.cosigned_by, state.policy) == (
        "alice",
        "supervisor:global@1",
        "global@1",
    )
    assert [type(e) for e in on.load(item)] == [ApprovalRequested, ApprovalGranted]
    assert drain(on, approving("merge")) == []  # nothing more to do
    assert len(decisions(on, run)) == 1


def test_cosign_user_first_then_the_supervisor_closes_the_gate(on: EventStore, repo: Path) -> None:
    """The user's approval is a vote (the gate stays open); the supervisor's approval closes
    it, co-signed by the user, and hands the run to ``resume``."""
    policy(on, autonomy="cosign")
    run, [item] = ask(on, repo, [feature_gate("merge")])

    voted = approve_item(on, item, actor="alice", comment="ship it", cosign="global@1")

    assert voted.decision is None
    assert [(v.actor, v.policy) for v in voted.votes] == [("alice", "global@1")]
    assert [type(e) for e in on.load(item)] == [ApprovalRequested, ApprovalVoted]

    assert drain(on, approving("merge")) == [run]

    state = decided(on, item)
    assert isinstance(state, ApprovalGranted)
    assert (state.actor, state.cosigned_by) == ("supervisor:global@1", "alice")
    [made] = decisions(on, run)
    assert (made.decision, made.acted, made.cosign_pending) == ("approve", True, False)
    assert tracked(on) == last_followed(on)  # the vote's position too


def test_cosign_a_vote_that_lands_after_the_supervisors_approval_closes_the_gate(
    on: EventStore, repo: Path
) -> None:
    """A user voted just after the supervisor approved (a race): its next pass closes the gate."""
    policy(on, autonomy="cosign")
    run, [item] = ask(on, repo, [feature_gate("merge")])
    drain(on, approving("merge"))

    append_vote(on, item, actor="alice", rationale="ok", policy="global@1")
    evaluator = approving("merge")
    assert drain(on, evaluator) == [run]

    assert evaluator.prompts == []
    state = decided(on, item)
    assert isinstance(state, ApprovalGranted)
    assert (state.actor, state.cosigned_by) == ("supervisor:global@1", "alice")
    assert tracked(on) == last_followed(on)


@pytest.mark.parametrize("declines", ["escalate", "reject"])
def test_cosign_supervisor_declining_lets_the_user_decide_alone(
    on: EventStore, repo: Path, declines: str
) -> None:
    """The supervisor escalates or rejects: nothing is decided, the user's approval decides
    alone (no co-signer)."""
    policy(on, autonomy="cosign")
    run, [item] = ask(on, repo, [feature_gate("merge")])
    drain(on, ScriptedEvaluator([reply(declines, "too risky to sign")]))
    [made] = decisions(on, run)
    assert (made.decision, made.acted, made.cosign_pending) == (declines, False, False)
    assert decided(on, item) is None

    approve_item(on, item, actor="alice", cosign="global@1")

    state = decided(on, item)
    assert isinstance(state, ApprovalGranted)
    assert (state.actor, state.cosigned_by) == ("alice", None)
    assert [type(e) for e in on.load(item)] == [ApprovalRequested, ApprovalGranted]


# --- the user wins ------------------------------------------------------------------------


def test_a_user_overrides_the_supervisor_while_the_run_still_waits(
    on: EventStore, repo: Path
) -> None:
    """Autonomous approval, run not resumed yet: the user's rejection replaces it."""
    policy(on, autonomy="autonomous")
    run, [item] = ask(on, repo, [feature_gate("merge")])
    drain(on, approving("merge"))
    assert load_run(on, run).waiting_for == [item]  # resume is the caller's: not called here

    reject_item(on, item, actor="alice", reason="not before the release")

    state = decided(on, item)
    assert isinstance(state, ApprovalRejected)
    assert (state.actor, state.overrides, state.rationale) == (
        "alice",
        "supervisor:global@1",
        "not before the release",
    )
    kinds = [type(e) for e in on.load(item)]
    assert kinds == [ApprovalRequested, ApprovalGranted, ApprovalRejected]
    with pytest.raises(AlreadyDecidedError):  # the user's own decision is final
        approve_item(on, item, actor="bob")


def test_a_user_cannot_override_once_the_run_went_on(on: EventStore, repo: Path) -> None:
    """Once the run resumed on the supervisor's approval, the user is told to fork."""
    policy(on, autonomy="autonomous")
    run, [item] = ask(on, repo, [feature_gate("merge")])
    drain(on, approving("merge"))
    resume_run(on, run, pid=os.getpid(), host=host_name(), process_start=process_start(os.getpid()))

    with pytest.raises(AlreadyDecidedError, match="fork") as refused:
        reject_item(on, item, actor="alice", reason="too late")

    assert refused.value.actor == "supervisor:global@1"
    state = decided(on, item)
    assert isinstance(state, ApprovalGranted)
    assert len(on.load(item)) == 2


def test_a_user_deciding_while_the_evaluator_runs_wins(on: EventStore, repo: Path) -> None:
    """The user rejects while the evaluator thinks: the supervisor's approval is refused,
    recorded as such, and decides nothing."""
    policy(on, autonomy="autonomous")
    run, [item] = ask(on, repo, [feature_gate("plan")])

    def user_decides(state: ItemState) -> None:
        reject_item(on, state.item_id, actor="alice", reason="I know better")

    assert drain(on, approving("plan"), before_evaluate=user_decides) == []

    [refused] = refusals(on, run)
    assert (refused.subject_id, refused.decision, refused.decided_by) == (item, "approve", "alice")
    assert (refused.policy_version, refused.reason) == ("global@1", "the item was decided first")
    assert decisions(on, run) == []
    state = decided(on, item)
    assert isinstance(state, ApprovalRejected)
    assert state.actor == "alice"
    assert len(on.load(item)) == 2
    assert tracked(on) == last_followed(on)


def test_a_cosign_vote_cast_while_the_evaluator_runs_is_counted(on: EventStore, repo: Path) -> None:
    """The user votes while the evaluator thinks: the supervisor's approval closes the gate."""
    policy(on, autonomy="cosign")
    run, [item] = ask(on, repo, [feature_gate("merge")])

    def user_votes(state: ItemState) -> None:
        approve_item(on, state.item_id, actor="alice", cosign="global@1")

    assert drain(on, approving("merge"), before_evaluate=user_votes) == [run]

    state = decided(on, item)
    assert isinstance(state, ApprovalGranted)
    assert (state.actor, state.cosigned_by) == ("supervisor:global@1", "alice")
    assert [type(e) for e in on.load(item)] == [ApprovalRequested, ApprovalVoted, ApprovalGranted]
    assert tracked(on) == last_followed(on)


def test_an_item_decided_before_the_supervisor_reads_it_is_skipped(
    on: EventStore, repo: Path
) -> None:
    """Answered by the user first: no evaluation, no event, the tracking moves past it."""
    policy(on, autonomy="autonomous")
    run, [item] = ask(on, repo, [question()])
    answer_question(on, item, actor="alice", option_id="large")
    before = on.max_position()
    evaluator = approving("question")

    drain(on, evaluator)

    assert evaluator.prompts == []
    assert on.max_position() == before
    assert decisions(on, run) == refusals(on, run) == []
    assert tracked(on) == last_followed(on)


def test_a_run_cancelled_while_the_evaluator_runs_is_not_decided(
    on: EventStore, repo: Path
) -> None:
    """The run ended meanwhile: the approval is refused (nobody decided, the run ended)."""
    policy(on, autonomy="autonomous")
    run, [item] = ask(on, repo, [feature_gate("plan")])

    def user_cancels(state: ItemState) -> None:
        cancel_run(on, state.asked.run_id, cancelled_by="alice", reason="not needed")

    assert drain(on, approving("plan"), before_evaluate=user_cancels) == []

    [refused] = refusals(on, run)
    assert (refused.decision, refused.decided_by, refused.reason) == (
        "approve",
        "system:run-ended",
        "the run had ended",
    )
    assert decisions(on, run) == []
    assert decided(on, item) is None
    assert tracked(on) == last_followed(on)


def test_an_item_of_an_ended_run_is_skipped(on: EventStore, repo: Path) -> None:
    """A cancelled run's items are not evaluated."""
    policy(on, autonomy="autonomous")
    run, _ = ask(on, repo, [feature_gate("plan")])
    cancel_run(on, run, cancelled_by="alice", reason="changed my mind")
    evaluator = approving("plan")

    drain(on, evaluator)

    assert evaluator.prompts == []
    assert decisions(on, run) == []
    assert tracked(on) == last_followed(on)


# --- the evaluator fails --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "why"),
    [
        (AgentTimeoutError("claude-code timed out after 60s"), "the evaluator failed: claude-code"),
        (RuntimeError("exit 3: no credits\nmore"), "the evaluator failed: exit 3: no credits"),
        ("I think this looks great, approve!", "the evaluator's reply had no JSON verdict"),
        ('{"verdict": "approve", "rationale": ', "the evaluator's reply was not valid JSON"),
        ('{"verdict": "approve"}', "the evaluator gave no rationale"),
        ('{"verdict": "ship", "rationale": "yes"}', "the evaluator's verdict 'ship' is not"),
        ('["approve"]', "the evaluator's reply had no JSON verdict"),
    ],
)
def test_an_evaluator_that_fails_escalates(
    on: EventStore, repo: Path, script: str | BaseException, why: str
) -> None:
    """Timeout, crash or an unreadable reply: escalate with the reason; the item waits."""
    policy(on, autonomy="autonomous")
    run, [item] = ask(on, repo, [feature_gate("merge")])

    assert drain(on, ScriptedEvaluator([script])) == []

    [made] = decisions(on, run)
    assert (made.decision, made.acted, made.cosign_pending) == ("escalate", False, False)
    assert made.rationale.startswith(why), made.rationale
    assert "\n" not in made.rationale
    assert decided(on, item) is None
    assert tracked(on) == last_followed(on)


def test_a_free_text_answer_is_given_as_text(on: EventStore, repo: Path) -> None:
    """An answer that is none of the options is free text (the question allows it)."""
    policy(on, autonomy="autonomous")
    _, [item] = ask(on, repo, [question()])

    drain(on, ScriptedEvaluator([reply("answer", "two modules", answer="medium")]))

    state = decided(on, item)
    assert isinstance(state, QuestionAnswered)
    assert (state.answer, state.option_id) == ("medium", None)


def test_an_answer_that_is_not_an_option_escalates(on: EventStore, repo: Path) -> None:
    """A question without free text takes one of its options: another answer escalates."""
    policy(on, autonomy="autonomous")
    me, host, started = os.getpid(), host_name(), process_start(os.getpid())
    run = create_run(
        on, workflow="feature", agent_type="claude-code", repo=str(repo), node_names=["scope"],
        created_by="test", pid=me, host=host, process_start=started,
    )  # fmt: skip
    state = start_run(on, run, pid=me, host=host, process_start=started)
    item = item_stream_id(run, "strict")
    strict = question("strict")
    on.append(
        [
            QuestionAsked(
                originator_id=item,
                originator_version=1,
                timestamp=utc_now(),
                run_id=run,
                node="scope",
                question=strict.question,
                options=strict.options,
                free_text=False,
                interrupt_id="strict",
            )
        ]
    )
    suspend_run(on, run, [strict], epoch=state.epoch)  # finds the item asked: asks nothing

    assert drain(on, ScriptedEvaluator([reply("answer", "two modules", answer="medium")])) == []

    [made] = decisions(on, run)
    assert made.decision == "escalate"
    assert made.rationale.startswith("the evaluator's answer 'medium' is not one of the options")
    assert decided(on, item) is None


# --- the flag -------------------------------------------------------------------------------


def tracking_rows(db_path: Path) -> list[tuple[str, int]]:
    """The tracking table as SQLite has it (read apart from the store)."""
    db = sqlite3.connect(db_path)
    try:
        return db.execute("SELECT application_name, notification_id FROM tracking").fetchall()
    finally:
        db.close()


def test_with_the_flag_off_the_supervisor_reads_and_writes_nothing(
    store: EventStore, repo: Path, db_path: Path
) -> None:
    """``collaboration`` off: ``drain`` raises; the log and the tracking are as they were."""
    policy(store, autonomy="autonomous")
    collaboration(store)
    ask(store, repo, [feature_gate("plan")])
    drain(store, approving("plan"))
    handled = tracked(store)
    assert tracking_rows(db_path) == [(SUPERVISOR, handled)]
    run, [item] = ask(store, repo, [feature_gate("merge")])
    collaboration(store, on=False)
    before = store.max_position()
    evaluator = approving("merge")

    with pytest.raises(SupervisorOffError, match="collaboration"):
        Supervisor(store, evaluator).drain()

    assert store.max_position() == before
    assert evaluator.prompts == []
    assert tracking_rows(db_path) == [(SUPERVISOR, handled)]
    assert handled < last_followed(store)
    assert decided(store, item) is None
    assert decisions(store, run) == []


def test_the_evaluator_never_sees_a_file_through_a_link_out_of_the_repository(
    on: EventStore, repo: Path, tmp_path: Path
) -> None:
    """A gate's approved file is a symbolic link to a file outside the repository whose
    hash matches what was asked: its content is not read into the evaluator's prompt; a
    plain file's is.
    """
    import hashlib

    from events.inbox import ArtifactRef

    secret = tmp_path / "secret.md"
    secret.write_text("PRIVATE-NOTES-OUTSIDE-THE-REPOSITORY\n")
    (repo / "linked.md").symlink_to(secret)
    (repo / "plain.md").write_text("THE-SPEC-TO-APPROVE\n")
    policy(on, autonomy="advisory")
    evaluator = approving("prd")
    gate = msgspec.structs.replace(
        feature_gate("prd"),
        artifacts=[
            ArtifactRef(path=name, sha256=hashlib.sha256(content).hexdigest())
            for name, content in (
                ("linked.md", secret.read_bytes()),
                ("plain.md", (repo / "plain.md").read_bytes()),
            )
        ],
    )
    ask(on, repo, [gate])
    drain(on, evaluator)
    [prompt] = evaluator.prompts
    assert "THE-SPEC-TO-APPROVE" in prompt
    assert "PRIVATE-NOTES-OUTSIDE-THE-REPOSITORY" not in prompt
