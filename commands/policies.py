"""The supervisor's policies, folded from their stream; configuring, enabling, disabling one.

Scopes are ``global``, ``repo:<absolute path>`` and ``run:<run id hex>``. An
item is covered by the most specific *enabled* policy of its run, its run's
repository, or the global one. A policy's autonomy may differ per item kind
(a gate's kind as its workflow names it: the feature workflow's ``prd``, ``plan`` and
``merge``; ``question``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from events.base import Event, utc_now
from events.errors import ConcurrencyError, PolicyError
from events.inbox import ApprovalRequested, QuestionAsked
from events.runs import RunCreated
from events.store import EventStore
from events.supervisor import (
    AUTONOMY_LEVELS,
    EVALUATOR_TIMEOUT,
    ITEM_KINDS,
    POLICY_STREAM_ID,
    Guardrails,
    PolicyConfigured,
    PolicyDisabled,
    PolicyEnabled,
)

if TYPE_CHECKING:
    from commands.inbox_state import ItemState


@dataclass
class Policy:
    """One scope's policy as it stands."""

    scope: str
    version: int
    autonomy: str
    overrides: dict[str, str] = field(default_factory=dict)
    guardrails: Guardrails = field(default_factory=Guardrails)
    model: str | None = None
    timeout: float = EVALUATOR_TIMEOUT
    enabled: bool = True
    configured_by: str = ""
    configured_at: datetime | None = None

    @property
    def label(self) -> str:
        """What decisions record as the policy's version: ``global@3``."""
        return f"{self.scope}@{self.version}"

    def autonomy_for(self, kind: str) -> str:
        return self.overrides.get(kind, self.autonomy)

    def as_dict(self) -> dict[str, Any]:
        import msgspec

        return {
            "scope": self.scope,
            "version": self.version,
            "label": self.label,
            "enabled": self.enabled,
            "autonomy": self.autonomy,
            "overrides": dict(self.overrides),
            "guardrails": msgspec.to_builtins(self.guardrails),
            "model": self.model,
            "timeout": self.timeout,
            "configured_by": self.configured_by,
            "configured_at": self.configured_at.isoformat() if self.configured_at else None,
        }


def fold_policies(events: Iterable[Event]) -> dict[str, Policy]:
    """Every scope's policy, by scope."""
    policies: dict[str, Policy] = {}
    for event in events:
        if isinstance(event, PolicyConfigured):
            policies[event.scope] = Policy(
                scope=event.scope,
                version=event.version,
                autonomy=event.autonomy,
                overrides=dict(event.overrides),
                guardrails=event.guardrails,
                model=event.model,
                timeout=event.timeout,
                configured_by=event.configured_by,
                configured_at=event.timestamp,
            )
        elif isinstance(event, PolicyEnabled | PolicyDisabled) and event.scope in policies:
            policies[event.scope].enabled = isinstance(event, PolicyEnabled)
    return policies


def load_policies(store: EventStore) -> dict[str, Policy]:
    return fold_policies(store.load(POLICY_STREAM_ID))


def policy_for(policies: dict[str, Policy], run_id: UUID, repo: str) -> Policy | None:
    """The most specific enabled policy covering a run: its own, its repository's, global."""
    for scope in (f"run:{run_id.hex}", f"repo:{repo}", "global"):
        policy = policies.get(scope)
        if policy is not None and policy.enabled:
            return policy
    return None


def source_repo(created: RunCreated | None) -> str:
    """The user's repository of a run (a feature run's worktree is not it): what a
    ``repo:`` scope names."""
    if created is None:
        return ""
    return created.inputs.get("source_repo") or created.repo


def covering(
    store: EventStore, policies: dict[str, Policy], item_id: UUID
) -> tuple[ItemState, Policy] | None:
    """An undecided item and the enabled policy covering it; None when either is missing."""
    from commands.inbox_state import load_item

    item = load_item(store, item_id)
    if item is None or item.decision is not None:
        return None
    created = store.load(item.asked.run_id, types=[RunCreated])
    run = created[0] if created and isinstance(created[0], RunCreated) else None
    policy = policy_for(policies, item.asked.run_id, source_repo(run))
    return (item, policy) if policy is not None else None


def item_kind(asked: QuestionAsked | ApprovalRequested) -> str:
    """``question``, or the kind the gate's workflow gave it (the feature workflow's prd,
    plan, merge; ``gate`` for one that names none), whatever its node is called."""
    if isinstance(asked, QuestionAsked):
        return "question"
    return asked.gate_kind


def check_policy(autonomy: str, overrides: dict[str, str], guardrails: Guardrails) -> None:
    """One ``PolicyError`` line for the first thing wrong with a policy."""
    if autonomy not in AUTONOMY_LEVELS:
        raise PolicyError(
            f"Unknown autonomy {autonomy!r}; use one of {', '.join(AUTONOMY_LEVELS)}."
        )
    for kind, level in overrides.items():
        if kind not in ITEM_KINDS:
            raise PolicyError(
                f"Unknown item kind {kind!r} in an override; use one of {', '.join(ITEM_KINDS)}."
            )
        if level not in AUTONOMY_LEVELS:
            raise PolicyError(
                f"Unknown autonomy {level!r} for {kind}; use one of {', '.join(AUTONOMY_LEVELS)}."
            )
    for name in ("max_diff_lines", "max_files_changed"):
        value = getattr(guardrails, name)
        if value is not None and value < 0:
            raise PolicyError(f"{name} must be 0 or more, not {value}.")
    if guardrails.auto_approve and not guardrails.configured():
        raise PolicyError("auto_approve needs at least one guardrail to pass.")


def configure_policy(
    store: EventStore,
    scope: str,
    *,
    autonomy: str,
    overrides: dict[str, str],
    guardrails: Guardrails,
    model: str | None,
    timeout: float,
    actor: str,
) -> Policy:
    """Set ``scope``'s policy (its next version); it is enabled."""
    check_policy(autonomy, overrides, guardrails)
    if not 1 <= timeout <= 24 * 3600:
        raise PolicyError(f"The evaluator timeout must be 1 to 86400 seconds, not {timeout:g}.")
    fields = {
        "scope": scope,
        "autonomy": autonomy,
        "overrides": overrides,
        "guardrails": guardrails,
        "model": model,
        "timeout": timeout,
        "configured_by": actor,
    }
    _append(
        store,
        lambda policies: (PolicyConfigured, {**fields, "version": _next(policies, scope)}),
    )
    return load_policies(store)[scope]


def set_policy_enabled(store: EventStore, scope: str, enabled: bool, *, actor: str) -> Policy:
    """Enable or disable ``scope``'s policy; a scope with none is a ``PolicyError``."""

    def event(policies: dict[str, Policy]) -> tuple[type[Event], dict[str, Any]]:
        if scope not in policies:
            raise PolicyError(
                f"No policy for scope {scope}; set one with `shep supervisor configure`."
            )
        return (PolicyEnabled if enabled else PolicyDisabled), {"scope": scope, "changed_by": actor}

    _append(store, event)
    return load_policies(store)[scope]


def _next(policies: dict[str, Policy], scope: str) -> int:
    current = policies.get(scope)
    return current.version + 1 if current else 1


def _append(store: EventStore, make: Any) -> None:
    """Append the event ``make(policies)`` returns at the stream's next version (retrying)."""
    for _ in range(5):
        events = store.load(POLICY_STREAM_ID)
        cls, fields = make(fold_policies(events))
        version = events[-1].originator_version + 1 if events else 1
        event = cls(
            originator_id=POLICY_STREAM_ID,
            originator_version=version,
            timestamp=utc_now(),
            **fields,
        )
        try:
            store.append([event])
            return
        except ConcurrencyError:
            continue
    raise ConcurrencyError("The policies changed five times while this command ran; try again.")
