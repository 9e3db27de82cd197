"""Change settings: the agent shep drives, and plain settings. Secrets never go in events."""

from __future__ import annotations

from commands.run_state import E
from events.base import utc_now
from events.settings import SETTINGS_STREAM_ID, AgentConfigured, SettingChanged
from events.store import EventStore


def _next_version(store: EventStore) -> int:
    latest = store.recorder.select_events(SETTINGS_STREAM_ID, desc=True, limit=1)
    return latest[0].originator_version + 1 if latest else 1


def _append(store: EventStore, event_type: type[E], **fields: object) -> E:
    event = event_type(
        originator_id=SETTINGS_STREAM_ID,
        originator_version=_next_version(store),
        timestamp=utc_now(),
        **fields,
    )
    store.append([event])
    return event


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
    return _append(
        store,
        AgentConfigured,
        agent_type=agent_type,
        auth_method=auth_method,
        model=model,
        binary=binary,
        binary_version=binary_version,
        token_configured=token_configured,
        configured_by=configured_by,
    )


def change_setting(store: EventStore, *, key: str, value: str, changed_by: str) -> SettingChanged:
    """Record a plain setting's new value (validated by the caller)."""
    return _append(store, SettingChanged, key=key, value=value, changed_by=changed_by)
