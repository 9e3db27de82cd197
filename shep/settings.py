"""The current settings, folded from the settings stream.

The agent type comes only from here: nothing defaults or guesses one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from events.settings import SETTINGS_STREAM_ID, AgentConfigured, SettingChanged
from events.store import EventStore
from shep.errors import AgentNotConfiguredError, SettingsError


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise SettingsError(f"{value!r} is not a number of seconds.") from None
    if seconds <= 0:
        raise SettingsError("The value must be a positive number of seconds.")
    return seconds


#: Plain settings: name -> (parser, default, help).
SETTINGS: dict[str, tuple[Callable[[str], float], float, str]] = {
    "heartbeat_interval": (_positive_seconds, 30.0, "seconds between worker heartbeats"),
    "agent_timeout": (_positive_seconds, 1800.0, "seconds an agent call may take (run --timeout)"),
    "orphan_after": (_positive_seconds, 120.0, "heartbeat age after which a run is interrupted"),
}


@dataclass
class Settings:
    """What the settings stream says now."""

    agent_type: str | None = None
    auth_method: str | None = None
    model: str | None = None
    binary: str | None = None
    binary_version: str | None = None
    token_configured: bool = False
    values: dict[str, float] = field(
        default_factory=lambda: {name: spec[1] for name, spec in SETTINGS.items()}
    )

    def require_agent(self) -> str:
        """The configured agent type, or ``AgentNotConfiguredError``."""
        if not self.agent_type:
            raise AgentNotConfiguredError()
        return self.agent_type


def load_settings(store: EventStore) -> Settings:
    """Fold the settings stream."""
    settings = Settings()
    for event in store.load(SETTINGS_STREAM_ID):
        if isinstance(event, AgentConfigured):
            settings.agent_type = event.agent_type
            settings.auth_method = event.auth_method
            settings.model = event.model
            settings.binary = event.binary
            settings.binary_version = event.binary_version
            settings.token_configured = event.token_configured
        elif isinstance(event, SettingChanged) and event.key in SETTINGS:
            settings.values[event.key] = SETTINGS[event.key][0](event.value)
    return settings


def parse_setting(key: str, value: str) -> float:
    """Validate a plain setting's value; ``SettingsError`` names the known keys."""
    if key not in SETTINGS:
        raise SettingsError(f"Unknown setting {key!r}. Known: {', '.join(sorted(SETTINGS))}.")
    return SETTINGS[key][0](value)
