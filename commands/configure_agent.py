"""Change settings: the agent shep drives, and plain settings. Secrets never go in events."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from commands.run_state import E
from events.base import Event, utc_now
from events.errors import ConcurrencyError
from events.setting_values import checked_value, fold_values
from events.settings import SETTINGS_STREAM_ID, AgentConfigured, SettingChanged
from events.store import EventStore

#: How often a settings change reloads and decides again when another writer got
#: there first. Each conflict is another writer's success, so N processes changing
#: settings at once need at most N - 1 retries each: this allows ten at once.
CONFLICT_RETRIES = 10


def _append(
    store: EventStore,
    event_type: type[E],
    decide: Callable[[Sequence[Event]], dict[str, Any]],
) -> E:
    """Load the settings stream, ``decide`` the event's fields on it, append it next.

    The settings stream has as many writers as there are shep processes (two
    terminals, a script setting several values at once). When one appends
    between our load and our append, the store refuses ours with
    ``ConcurrencyError``; we then reload and decide again on what is there now
    (a rule between settings may now refuse the value), a bounded number of
    times. Nothing is ever appended on a stale decision, and no change is lost.
    """
    for attempt in range(CONFLICT_RETRIES):
        # One read gives both the history decided on and the version it is at.
        history = store.load(SETTINGS_STREAM_ID)
        version = history[-1].originator_version if history else 0
        event = event_type(
            originator_id=SETTINGS_STREAM_ID,
            originator_version=version + 1,
            timestamp=utc_now(),
            **decide(history),
        )
        try:
            store.append([event])
        except ConcurrencyError:
            if attempt == CONFLICT_RETRIES - 1:
                raise
            continue
        return event
    raise AssertionError("unreachable")


def configure_agent(
    store: EventStore,
    *,
    agent_type: str,
    auth_method: str,
    configured_by: str,
    model: str | None = None,
    binary: str | None = None,
    binary_version: str | None = None,
    token_configured: bool = False,
) -> AgentConfigured:
    """Record the agent choice. The caller stores any token apart, never here."""
    if auth_method not in ("session", "token"):
        raise ValueError(f"auth_method must be 'session' or 'token', not {auth_method!r}")
    fields = {
        "agent_type": agent_type,
        "auth_method": auth_method,
        "model": model,
        "binary": binary,
        "binary_version": binary_version,
        "token_configured": token_configured,
        "configured_by": configured_by,
    }
    return _append(store, AgentConfigured, lambda _history: fields)


def change_setting(store: EventStore, *, key: str, value: str, changed_by: str) -> SettingChanged:
    """Record a plain setting's new value, checked against the settings it joins.

    Raises ``InvalidSettingError`` if the key is unknown, the value is not a
    finite number of seconds within the setting's bounds, or it breaks a rule
    between settings (heartbeat_interval at most a third of orphan_after).
    The recorded value is the parsed number (``"5"`` is recorded as ``"5.0"``).
    """

    def decide(history: Sequence[Event]) -> dict[str, Any]:
        current = fold_values(
            (e.key, e.value) for e in history if isinstance(e, SettingChanged)
        ).values
        parsed = checked_value(current, key, value)
        return {"key": key, "value": str(parsed), "changed_by": changed_by}

    return _append(store, SettingChanged, decide)
