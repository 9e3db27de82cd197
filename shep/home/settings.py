"""The current settings, folded from the settings stream.

The agent type comes only from here: nothing defaults or guesses one. The
plain settings (their kinds, bounds, defaults and rules) are defined in
``events.setting_values``, shared with the cheap readers every command runs
(``read_setting_values``: the orphan check, the inbox notice).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from events.base import Event, topic_of
from events.errors import AgentNotConfiguredError, UnknownEventError
from events.setting_values import (
    SettingValue,
    SettingValues,
    SkippedChange,
    default_counts,
    default_flags,
    default_texts,
    default_values,
    fold_values,
)
from events.settings import SETTINGS_STREAM_ID, AgentConfigured, SettingChanged

if TYPE_CHECKING:
    # Only types here: the fold itself needs no eventsourcing import.
    import apsw

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
    #: The seconds settings (see ``events.setting_values.SettingValues``).
    values: dict[str, float] = field(default_factory=default_values)
    flags: dict[str, bool] = field(default_factory=default_flags)
    texts: dict[str, str] = field(default_factory=default_texts)
    #: The whole-number settings (``counts["requirements_iterations"]``).
    counts: dict[str, int] = field(default_factory=default_counts)
    #: Recorded values that break the rules (written by an older shep) and are ignored.
    skipped: list[SkippedChange] = field(default_factory=list)

    def require_agent(self) -> str:
        """The configured agent type, or ``AgentNotConfiguredError``."""
        if not self.agent_type:
            raise AgentNotConfiguredError()
        return self.agent_type

    def every(self) -> dict[str, SettingValue]:
        """Every plain setting's value, in the order ``settings show`` lists them."""
        return SettingValues(
            values=self.values, flags=self.flags, texts=self.texts, counts=self.counts
        ).every()


def load_settings(store: EventStore) -> Settings:
    """Fold the settings stream. A recorded value that breaks the rules is skipped, never raised."""
    agent: AgentConfigured | None = None
    changes: list[tuple[str, str]] = []
    for event in store.load(SETTINGS_STREAM_ID):
        if isinstance(event, AgentConfigured):
            agent = event
        elif isinstance(event, SettingChanged):
            changes.append((event.key, event.value))
    return _settings(agent, fold_values(changes))


def read_settings(conn: apsw.Connection) -> Settings:
    """What ``load_settings`` folds, read from the read side's database with the cheap
    readers: on a shared store that is this home's copy, so the settings show while the
    server is away, as status does."""
    return _settings(read_agent_configured(conn), read_setting_values(conn))


def _settings(agent: AgentConfigured | None, folded: SettingValues) -> Settings:
    """The settings of the last agent configured and of the folded plain settings."""
    settings = Settings()
    if agent is not None:
        settings.agent_type = agent.agent_type
        settings.auth_method = agent.auth_method
        settings.model = agent.model
        settings.binary = agent.binary
        settings.binary_version = agent.binary_version
        settings.token_configured = agent.token_configured
    settings.values = folded.values
    settings.flags = folded.flags
    settings.texts = folded.texts
    settings.counts = folded.counts
    settings.skipped = list(folded.skipped.values())
    return settings


def read_setting_values(conn: apsw.Connection) -> SettingValues:
    """The plain settings, folded straight from the settings stream in shep.db.

    The same fold as ``load_settings``, with its skipping of bad records, but
    cheap (apsw and msgspec, no eventsourcing): the checks every command runs
    before its own work read it. The settings' version is their events'
    (``class_version``): a changed setting, renamed or of another kind, is an
    upcaster of ``SettingChanged``, which this fold applies as the store's does.
    """
    changes = []
    try:
        for (state,) in conn.execute(
            "SELECT state FROM stored_events WHERE originator_id=? AND topic=? "
            "ORDER BY originator_version",
            (SETTINGS_STREAM_ID.hex, topic_of(SettingChanged)),
        ):
            event = _setting_changed(state)
            changes.append((event.key, event.value))
    except UnknownEventError as e:
        from events.migrations import written_by

        raise e.naming(written_by(conn), where=f"The event store {conn.filename}") from None
    return fold_values(changes)


def read_agent_configured(conn: apsw.Connection) -> AgentConfigured | None:
    """The agent setting as last recorded in the settings stream in shep.db (None: no
    agent configured), read as cheaply as ``read_setting_values``, from a read-only
    connection too (``shep doctor`` reads the home without changing it)."""
    try:
        row = conn.execute(
            "SELECT state FROM stored_events WHERE originator_id=? AND topic=? "
            "ORDER BY originator_version DESC LIMIT 1",
            (SETTINGS_STREAM_ID.hex, topic_of(AgentConfigured)),
        ).fetchone()
        if row is None:
            return None
        return agent_configured_from(row[0])
    except UnknownEventError as e:
        from events.migrations import written_by

        raise e.naming(written_by(conn), where=f"The event store {conn.filename}") from None


def agent_configured_from(state: bytes) -> AgentConfigured:
    """A stored ``AgentConfigured`` of any version (upcast; a newer one refused)."""
    event = _stored(AgentConfigured, state)
    assert isinstance(event, AgentConfigured)
    return event


def _setting_changed(state: bytes) -> SettingChanged:
    event = _stored(SettingChanged, state)
    assert isinstance(event, SettingChanged)
    return event


def _stored(cls: type[Event], state: bytes) -> Event:
    """A stored ``cls`` event of any version, as the catalog reads it (upcast from an
    older one; a newer one refused) without importing the catalog."""
    import msgspec

    from events.base import reader_of, upcast

    try:
        return reader_of(cls)(state)
    except msgspec.ValidationError:
        return upcast(cls, state)
