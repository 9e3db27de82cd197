"""Versioned events: an upcast type reads old logs unchanged; a newer shep's events are refused.

The old log is a real one, written by shep 0.1.0 (``tests/events/stores``). A
"newer shep" is this one with its version and one event class replaced in the
test's process: it writes to the store as a later release would, and the real
``shep`` command line, in a subprocess, then meets what it wrote.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar
from uuid import UUID

import msgspec
import pytest

from events import catalog, versions
from events.audit import open_log, verify_chain
from events.base import Event, reader_of, topic_of, utc_now
from events.errors import UnknownEventError
from events.settings import SETTINGS_STREAM_ID, AgentConfigured, SettingChanged
from events.store import EventStore
from tests.events.old_stores import EVENTS_0_1_0, HEAD_0_1_0, unpack_0_1_0
from tests.support.cli import shep

#: This shep's version (the tests wear a newer one for a while).
THIS_SHEP = versions.SHEP_VERSION

#: The run of the demo agent in the 0.1.0 store.
DEMO_RUN = "d247bdbc"


class SettingChangedV2(Event, frozen=True, kw_only=True, tag_field="class_version", tag=2):
    """``SettingChanged`` as a later shep might change it: ``changed_by`` is now ``actor``,
    and a change says where it came from."""

    class_version = 2

    key: str
    value: str
    actor: str
    source: str = "cli"

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """``changed_by`` became ``actor``; version 1 changes came from the CLI."""
        state["actor"] = state.pop("changed_by")
        state["source"] = "cli"


class RunTeleported(Event, frozen=True, kw_only=True):
    """An event type a later shep adds to a run's stream."""

    to: str


# Stored under the topics a later shep's classes would have.
SettingChangedV2.__module__, SettingChangedV2.__qualname__ = "events.settings", "SettingChanged"
RunTeleported.__module__ = "events.runs"


@pytest.fixture
def setting_changed_v2(monkeypatch: pytest.MonkeyPatch) -> type[SettingChangedV2]:
    """The catalog of a shep whose ``SettingChanged`` is at version 2."""
    topic = topic_of(SettingChanged)
    assert topic_of(SettingChangedV2) == topic
    catalog.check_versions(SettingChangedV2)
    monkeypatch.setitem(catalog.EVENT_CLASSES, topic, SettingChangedV2)
    monkeypatch.setitem(catalog.READERS, topic, reader_of(SettingChangedV2))
    return SettingChangedV2


def _export_lines(home: Path) -> dict[int, str]:
    """`shep audit export`'s event lines, by position."""
    result = shep("audit", "export", env={"SHEP_HOME": str(home)}, check=True)
    lines = {}
    for line in result.stdout.splitlines():
        record = json.loads(line)
        if "position" in record:
            lines[int(record["position"])] = line
    return lines


def _as_newer_shep(monkeypatch: pytest.MonkeyPatch, db: Path) -> EventStore:
    """The store opened by shep 0.3.0 (this process, wearing its version)."""
    monkeypatch.setattr(versions, "SHEP_VERSION", "0.3.0")
    return EventStore(db)


def _run_id(db: Path, prefix: str) -> UUID:
    conn = open_log(db)
    try:
        row = conn.execute(
            "SELECT originator_id FROM stored_events WHERE originator_id LIKE ? LIMIT 1",
            (prefix + "%",),
        ).fetchone()
    finally:
        conn.close()
    assert row is not None
    return UUID(row[0])


def test_an_upcast_event_type_reads_the_old_log_which_stays_as_it_was(
    shep_home: Path, setting_changed_v2: type[SettingChangedV2]
) -> None:
    """A type changed with an upcaster (``changed_by`` renamed): the 0.1.0 store's events of
    it decode in the new form, new ones are stored in it, and the log is not rewritten: the
    chain verifies with 0.1.0's hash at 0.1.0's head, and `shep audit export` gives the same
    lines for 0.1.0's events, byte for byte, as before the upgrade."""
    db = unpack_0_1_0(shep_home)
    before = _export_lines(shep_home)
    assert len(before) == EVENTS_0_1_0

    with EventStore(db) as store:
        agent, change = store.load(SETTINGS_STREAM_ID)
        assert isinstance(agent, AgentConfigured)
        assert isinstance(change, SettingChangedV2)
        assert (change.key, change.value, change.actor, change.source) == (
            "heartbeat_interval",
            "20.0",
            "root@vm",
            "cli",
        )
        new = SettingChangedV2(
            originator_id=SETTINGS_STREAM_ID,
            originator_version=3,
            timestamp=utc_now(),
            key="heartbeat_interval",
            value="25.0",
            actor="tester@host",
            source="api",
        )
        store.append([new])
        assert store.load(SETTINGS_STREAM_ID, after_version=2) == [new]
        assert [e for _, e in store.positions_of([SettingChangedV2], after=0)][-1] == new

    conn = open_log(db)
    try:
        (stored,) = conn.execute(
            "SELECT state FROM stored_events WHERE notification_id = ?", (EVENTS_0_1_0 + 1,)
        ).fetchone()
        assert bytes(stored).startswith(b'{"class_version":2,')
        report = verify_chain(conn, anchor_position=EVENTS_0_1_0)
    finally:
        conn.close()
    assert report.ok
    assert report.events == EVENTS_0_1_0 + 1
    assert report.anchor_hash == HEAD_0_1_0

    after = _export_lines(shep_home)
    assert {p: after[p] for p in before} == before
    assert EVENTS_0_1_0 + 1 in after


def test_an_event_type_of_a_newer_shep_is_refused_naming_its_writer(
    shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store where shep 0.3.0 appended an event type this shep does not know: status, logs
    and replay refuse it with one line naming shep 0.3.0 and exit 5; the chain still
    verifies (verifying reads no event)."""
    db = unpack_0_1_0(shep_home)
    run = _run_id(db, DEMO_RUN)
    with _as_newer_shep(monkeypatch, db) as store:
        version = store.stream_version(run)
        store.append(
            [RunTeleported(originator_id=run, originator_version=version + 1,
                           timestamp=utc_now(), to="mars")]
        )  # fmt: skip
    line = (
        f"shep: The event store {db} holds events.runs:RunTeleported events, written by "
        f"shep 0.3.0; this is shep {THIS_SHEP}: upgrade shep.\n"
    )
    env = {"SHEP_HOME": str(shep_home)}
    for args in (["status"], ["logs", DEMO_RUN], ["replay", DEMO_RUN, "--json"]):
        result = shep(*args, env=env)
        assert (result.returncode, result.stderr) == (5, line), args
        assert result.stdout == ""
    assert shep("audit", "verify", env=env).returncode == 0


def test_a_newer_version_of_a_known_event_type_is_refused_not_misread(
    shep_home: Path, monkeypatch: pytest.MonkeyPatch, setting_changed_v2: type[SettingChangedV2]
) -> None:
    """shep 0.3.0 records a setting in version 2 of ``SettingChanged``. This shep, which
    knows version 1, refuses the store with one line naming 0.3.0 rather than read the
    change as a version 1 one (it would otherwise drop the fields it does not know)."""
    db = unpack_0_1_0(shep_home)
    with _as_newer_shep(monkeypatch, db) as store:
        store.append(
            [setting_changed_v2(originator_id=SETTINGS_STREAM_ID, originator_version=3,
                                timestamp=utc_now(), key="heartbeat_interval", value="25.0",
                                actor="tester@host", source="api")]
        )  # fmt: skip
    result = shep("settings", "show", env={"SHEP_HOME": str(shep_home)})
    assert result.returncode == 5
    *before, refusal = result.stderr.splitlines()
    assert refusal == (
        f"shep: The event store {db} holds version 2 of events.settings:SettingChanged, "
        f"written by shep 0.3.0; this is shep {THIS_SHEP}: upgrade shep."
    )
    # Before it, only the projections changed since 0.1.0 are rebuilt (they hold no setting).
    assert all(line.startswith("Rebuil") for line in before)
    assert "25" not in result.stdout


# --- the catalog's rules ---------------------------------------------------------------


def test_a_version_2_state_is_tagged_first_and_older_and_newer_forms_are_told_apart(
    setting_changed_v2: type[SettingChangedV2],
) -> None:
    """Version 2 is stored with its tag first; a version 1 state is upcast, a version 3
    one refused (``UnknownEventError``), and a state that is no form of it is msgspec's
    validation error, not a refusal to read a newer shep's event."""
    topic = topic_of(SettingChanged)
    fields = {"originator_id": SETTINGS_STREAM_ID, "originator_version": 1, "timestamp": utc_now()}
    v2 = setting_changed_v2(**fields, key="k", value="v", actor="a", source="api")
    stored = catalog.encode_event(v2)
    assert stored.startswith(b'{"class_version":2,')
    assert catalog.decode_event(topic, stored) == v2

    v1 = msgspec.json.encode(SettingChanged(**fields, key="k", value="v", changed_by="a"))
    assert catalog.decode_event(topic, v1) == setting_changed_v2(
        **fields, key="k", value="v", actor="a", source="cli"
    )
    v3 = stored.replace(b'"class_version":2', b'"class_version":3')
    with pytest.raises(UnknownEventError) as refused:
        catalog.decode_event(topic, v3)
    assert (refused.value.topic, refused.value.version) == (topic, 3)
    with pytest.raises(msgspec.ValidationError):
        catalog.decode_event(topic, stored.replace(b'"value":"v"', b'"value":7'))


def test_a_version_1_type_refuses_a_state_of_a_later_version() -> None:
    """A type at version 1 (every type today) refuses a state that carries a version, or a
    field it does not know, as an unknown version, rather than drop what it cannot read."""
    topic = topic_of(SettingChanged)
    state = catalog.encode_event(
        SettingChanged(originator_id=SETTINGS_STREAM_ID, originator_version=1,
                       timestamp=utc_now(), key="k", value="v", changed_by="a")
    )  # fmt: skip
    assert isinstance(catalog.decode_event(topic, state), SettingChanged)
    with pytest.raises(UnknownEventError) as refused:
        catalog.decode_event(topic, b'{"class_version":2,' + state[1:])
    assert refused.value.version == 2
    with pytest.raises(UnknownEventError):
        catalog.decode_event("events.runs:RunTeleported", state)


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"tag_field": "class_version", "tag": 2}, "has no upcast_v1_v2"),
        ({}, 'declare it with tag_field="class_version", tag=2'),
        ({"tag_field": "class_version", "tag": 3}, 'declare it with tag_field="class_version"'),
    ],
)
def test_a_version_without_its_tag_or_upcaster_is_refused_at_import(
    config: dict[str, Any], problem: str
) -> None:
    """The catalog refuses (at import) a class whose version, tag and upcasters disagree."""

    class Changed(Event, frozen=True, kw_only=True, **config):
        class_version: ClassVar[int] = 2

    with pytest.raises(TypeError, match=problem):
        catalog.check_versions(Changed)


def test_every_event_class_passes_the_version_rules() -> None:
    """The shipped catalog (checked at import) holds every class at a valid version."""
    for cls in catalog.EVENT_CLASSES.values():
        catalog.check_versions(cls)


# --- a change of fields is a new version ------------------------------------------------

#: Each event type's fields at each of its versions, as recorded when that version shipped.
FIELDS_FILE = Path(__file__).with_name("event_fields.json")


def _fields(cls: type[Event]) -> list[list[str]]:
    found = []
    for f in msgspec.structs.fields(cls):
        if f.required:
            default = "required"
        elif f.default is not msgspec.NODEFAULT:
            default = repr(f.default)
        else:
            default = repr(f.default_factory())
        found.append([f.name, str(f.type), default])
    return found


def _current() -> dict[str, dict[str, list[list[str]]]]:
    return {
        topic: {str(cls.class_version): _fields(cls)}
        for topic, cls in sorted(catalog.EVENT_CLASSES.items())
    }


def test_a_change_of_an_event_types_fields_comes_with_a_new_version() -> None:
    """Every event type's fields at its version are the ones recorded when that version
    was made: a changed field needs a new ``class_version`` (and its upcaster), never an
    edit in place, or older logs would be read as if written in the new form."""
    recorded = json.loads(FIELDS_FILE.read_text())
    missing = []
    for topic, by_version in _current().items():
        ((version, fields),) = by_version.items()
        if version not in recorded.get(topic, {}):
            missing.append(f"{topic} v{version}")
            continue
        assert recorded[topic][version] == fields, (
            f"{topic} changed its fields at version {version}: raise its class_version, "
            "add the upcaster from the old version, and record the new one "
            f"({sys.executable} -m tests.events.test_versions)"
        )
    assert not missing, (
        f"not recorded: {', '.join(missing)}; record them with "
        f"`{sys.executable} -m tests.events.test_versions`"
    )


def _record() -> None:
    """Add each event type's current version to ``event_fields.json`` (kept: older ones)."""
    recorded = json.loads(FIELDS_FILE.read_text()) if FIELDS_FILE.exists() else {}
    for topic, by_version in _current().items():
        for version, fields in by_version.items():
            recorded.setdefault(topic, {}).setdefault(version, fields)
    FIELDS_FILE.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    _record()
    subprocess.run(["git", "diff", "--stat", str(FIELDS_FILE)], check=False)
