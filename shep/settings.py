"""The current settings, folded from the settings stream.

The agent type comes only from here: nothing defaults or guesses one. The
plain settings (their bounds, defaults and rules) are defined in
``events.setting_values``, shared with the cheap orphan check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from events.setting_values import SkippedChange, default_values, fold_values
from events.settings import SETTINGS_STREAM_ID, AgentConfigured, SettingChanged
from shep.errors import AgentNotConfiguredError

if TYPE_CHECKING:
    # Only a type here: the fold itself needs no eventsourcing import.
    from events.store import EventStore


@dataclass
class Settings:
    """What the settings stream says now."""

    agent_type: str | None = None
    auth_method: str | None = None
    model: str | None = None
    binary: str | None = None
    binary_version: str | None = None
    token_configured: bool = False
    values: dict[str, float] = field(default_factory=default_values)
    #: Recorded values that break the rules (written by an older shep) and are ignored.
    skipped: list[SkippedChange] = field(default_factory=list)

    def require_agent(self) -> str:
        """The configured agent type, or ``AgentNotConfiguredError``."""
        if not self.agent_type:
            raise AgentNotConfiguredError()
        return self.agent_type


def load_settings(store: EventStore) -> Settings:
    """Fold the settings stream. A recorded value that breaks the rules is skipped, never raised."""
    settings = Settings()
    changes: list[tuple[str, str]] = []
    for event in store.load(SETTINGS_STREAM_ID):
        if isinstance(event, AgentConfigured):
            settings.agent_type = event.agent_type
            settings.auth_method = event.auth_method
            settings.model = event.model
            settings.binary = event.binary
            settings.binary_version = event.binary_version
            settings.token_configured = event.token_configured
        elif isinstance(event, SettingChanged):
            changes.append((event.key, event.value))
    folded = fold_values(changes)
    settings.values = folded.values
    settings.skipped = list(folded.skipped.values())
    return settings
