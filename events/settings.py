"""Events of the settings stream (one stream). Secrets never appear here."""

from __future__ import annotations

from events.base import Event, named_stream_id

SETTINGS_STREAM_ID = named_stream_id("settings")


class AgentConfigured(Event, frozen=True, kw_only=True):
    """The user chose the agent shep drives. The token, if any, is stored apart (0600)."""

    agent_type: str
    auth_method: str
    model: str | None = None
    binary: str | None = None
    binary_version: str | None = None
    token_configured: bool = False
    configured_by: str


class SettingChanged(Event, frozen=True, kw_only=True):
    """A plain setting (heartbeat interval, default timeout, ...) was changed."""

    key: str
    value: str
    changed_by: str
