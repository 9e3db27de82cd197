"""Policies as events: versions per scope, enabling, which one covers an item, what is refused."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import msgspec
import pytest

from commands.policies import (
    configure_policy,
    item_kind,
    load_policies,
    policy_for,
    set_policy_enabled,
)
from events import catalog
from events.base import topic_of, utc_now
from events.errors import PolicyError
from events.inbox import ApprovalRequested, QuestionAsked
from events.store import EventStore
from events.supervisor import (
    POLICY_STREAM_ID,
    Guardrails,
    PolicyConfigured,
    PolicyDisabled,
    PolicyEnabled,
)
from tests.shep.supervisor.evaluators import policy

RUN = UUID(int=42)
REPO = "/src/app"


def test_each_scope_counts_its_own_versions(store: EventStore) -> None:
    """A scope's new policy replaces its last one with the next version; labels name both."""
    assert policy(store, "global", "advisory").label == "global@1"
    assert policy(store, f"repo:{REPO}", "cosign").label == f"repo:{REPO}@1"
    second = policy(
        store,
        "global",
        "autonomous",
        overrides={"merge": "cosign"},
        guardrails=Guardrails(max_diff_lines=50),
        model="judge",
        timeout=30,
    )

    assert second.label == "global@2"
    policies = load_policies(store)
    assert sorted(policies) == ["global", f"repo:{REPO}"]
    assert (policies["global"].autonomy, policies["global"].overrides) == (
        "autonomous",
        {"merge": "cosign"},
    )
    assert policies["global"].autonomy_for("merge") == "cosign"
    assert policies["global"].autonomy_for("plan") == "autonomous"
    assert [type(e) for e in store.load(POLICY_STREAM_ID)] == [PolicyConfigured] * 3
    described = policies["global"].as_dict()
    assert described["label"] == "global@2"
    assert described["guardrails"] == {"max_diff_lines": 50}
    assert (described["model"], described["timeout"], described["enabled"]) == ("judge", 30, True)
    assert isinstance(datetime.fromisoformat(described["configured_at"]), datetime)


def test_policy_for_picks_the_most_specific_enabled_scope(store: EventStore) -> None:
    policy(store, "global", "advisory")
    policy(store, f"repo:{REPO}", "cosign")
    policy(store, f"run:{RUN.hex}", "autonomous")

    def covering(run: UUID = RUN, repo: str = REPO) -> str | None:
        found = policy_for(load_policies(store), run, repo)
        return found.label if found else None

    assert covering() == f"run:{RUN.hex}@1"
    assert covering(run=UUID(int=1)) == f"repo:{REPO}@1"
    assert covering(run=UUID(int=1), repo="/elsewhere") == "global@1"
    assert covering(repo="/elsewhere") == f"run:{RUN.hex}@1"

    disabled = set_policy_enabled(store, f"run:{RUN.hex}", False, actor="alice")
    assert (disabled.enabled, disabled.version) == (False, 1)
    assert covering() == f"repo:{REPO}@1"
    set_policy_enabled(store, f"repo:{REPO}", False, actor="alice")
    assert covering() == "global@1"
    set_policy_enabled(store, "global", False, actor="alice")
    assert covering() is None
    set_policy_enabled(store, f"run:{RUN.hex}", True, actor="alice")
    assert covering() == f"run:{RUN.hex}@1"

    kinds = [type(e) for e in store.load(POLICY_STREAM_ID)][3:]
    assert kinds == [PolicyDisabled, PolicyDisabled, PolicyDisabled, PolicyEnabled]


def test_configuring_a_disabled_scope_enables_it(store: EventStore) -> None:
    policy(store, "global", "advisory")
    set_policy_enabled(store, "global", False, actor="alice")
    again = policy(store, "global", "cosign")
    assert (again.enabled, again.label) == (True, "global@2")


def test_enabling_a_scope_without_a_policy_is_refused(store: EventStore) -> None:
    with pytest.raises(PolicyError, match="No policy for scope repo:/x; set one with"):
        set_policy_enabled(store, "repo:/x", True, actor="alice")
    assert store.load(POLICY_STREAM_ID) == []


@pytest.mark.parametrize(
    ("autonomy", "overrides", "guardrails", "timeout", "error"),
    [
        ("yolo", {}, Guardrails(), 60.0, "Unknown autonomy 'yolo'; use one of advisory, cosign"),
        ("cosign", {"deploy": "advisory"}, Guardrails(), 60.0, "Unknown item kind 'deploy'"),
        ("cosign", {"merge": "always"}, Guardrails(), 60.0, "Unknown autonomy 'always' for merge"),
        ("cosign", {}, Guardrails(max_diff_lines=-1), 60.0, "max_diff_lines must be 0 or more"),
        ("cosign", {}, Guardrails(max_files_changed=-3), 60.0, "max_files_changed must be 0"),
        ("cosign", {}, Guardrails(auto_approve=True), 60.0, "auto_approve needs at least one"),
        ("cosign", {}, Guardrails(), 0.5, "The evaluator timeout must be 1 to 86400 seconds"),
        ("cosign", {}, Guardrails(), 90000.0, "not 90000"),
    ],
)
def test_a_bad_policy_is_refused_and_nothing_recorded(
    store: EventStore,
    autonomy: str,
    overrides: dict[str, str],
    guardrails: Guardrails,
    timeout: float,
    error: str,
) -> None:
    with pytest.raises(PolicyError, match=error.replace("(", r"\(")):
        configure_policy(
            store,
            "global",
            autonomy=autonomy,
            overrides=overrides,
            guardrails=guardrails,
            model=None,
            timeout=timeout,
            actor="alice",
        )
    assert store.load(POLICY_STREAM_ID) == []


def test_auto_approve_with_only_blocked_paths_is_allowed(store: EventStore) -> None:
    rules = Guardrails(blocked_paths=["secrets/*"], auto_approve=True)
    assert policy(store, guardrails=rules).guardrails == rules


@pytest.mark.parametrize(
    ("node", "kind"),
    [("prd", "prd"), ("review", "plan"), ("ship_it", "merge"), ("plan_gate", "gate")],
)
def test_item_kind_of_a_gate_is_the_kind_its_workflow_gave_it(node: str, kind: str) -> None:
    """A gate's kind travels on its ``ApprovalRequested`` (issue 19): another workflow's
    ``review`` gate of kind plan is a plan gate to a policy, whatever its node is called,
    and a gate that names no kind is ``gate`` even at a feature gate's node name."""

    def gate(**kind: str) -> ApprovalRequested:
        return ApprovalRequested(
            originator_id=UUID(int=1),
            originator_version=1,
            timestamp=utc_now(),
            run_id=RUN,
            node=node,
            summary="s",
            **kind,
        )

    assert item_kind(gate() if kind == "gate" else gate(gate_kind=kind)) == kind


@pytest.mark.parametrize(
    ("node", "kind"),
    [("prd", "prd"), ("plan_gate", "plan"), ("merge_gate", "merge"), ("approve", "gate")],
)
def test_a_gate_asked_by_shep_0_2_has_its_feature_node_kind(node: str, kind: str) -> None:
    """An ``ApprovalRequested`` of version 2 (shep 0.2.0, no kind on it) is read with the
    kind its feature workflow node had then; any other node's gate is ``gate``."""
    stored = catalog.encode_event(
        ApprovalRequested(
            originator_id=UUID(int=1),
            originator_version=1,
            timestamp=utc_now(),
            run_id=RUN,
            node=node,
            summary="s",
        )
    )
    state = msgspec.json.decode(stored)
    del state["gate_kind"]
    state["class_version"] = 2
    asked = catalog.decode_event(topic_of(ApprovalRequested), msgspec.json.encode(state))
    assert isinstance(asked, ApprovalRequested)
    assert (asked.gate_kind, item_kind(asked)) == (kind, kind)


def test_item_kind_of_a_question_is_question_at_any_node() -> None:
    asked = QuestionAsked(
        originator_id=UUID(int=1),
        originator_version=1,
        timestamp=utc_now(),
        run_id=RUN,
        node="merge_gate",
        question="q?",
    )
    assert item_kind(asked) == "question"
