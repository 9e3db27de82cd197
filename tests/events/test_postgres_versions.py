"""The shared store's schema: an older one is migrated once; an older home never writes to a
newer one, and says why.

Schema 1 is the shared store shep 0.1.0 made: today's tables without ``shep_meta``
(the events table, its append function and trigger, and the tracking table are
unchanged since).
"""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from events import versions
from events.base import utc_now
from events.postgres_url import where
from events.postgres_verify import verify_pg_chain
from events.settings import SETTINGS_STREAM_ID, SettingChanged
from events.store import EventStore
from tests.support.cli import shep


def _changes(n: int) -> list[SettingChanged]:
    return [
        SettingChanged(originator_id=SETTINGS_STREAM_ID, originator_version=v,
                       timestamp=utc_now(), key="heartbeat_interval", value=f"{20 + v}.0",
                       changed_by="tester@host")
        for v in range(1, n + 1)
    ]  # fmt: skip


def _meta(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        return {k: v for k, v in conn.execute("SELECT key, value FROM shep_meta")}


def test_a_shared_store_of_schema_1_is_migrated_once(pg_url: str) -> None:
    """A shared store as shep 0.1.0 left it (no ``shep_meta``), with events: the first home
    to open it migrates it in one transaction and says so, its events untouched; homes
    opening it at the same time, and later, find it done and say nothing."""
    with EventStore(pg_url) as store:
        store.append(_changes(3))
    with psycopg.connect(pg_url) as conn:
        conn.execute("DROP TABLE shep_meta")
    before = verify_pg_chain(pg_url)

    notices: list[str] = []
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            EventStore(pg_url, on_notice=notices.append).close()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=open_store) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert notices == [
        f"upgraded the shared store at {where(pg_url)} from schema 1 to "
        f"{versions.STORE_SCHEMA_VERSION} (shep 0.1.0 -> {versions.SHEP_VERSION}), in one "
        "transaction; its events are untouched."
    ]
    assert _meta(pg_url) == {
        "schema_version": str(versions.STORE_SCHEMA_VERSION),
        "schema_written_by": versions.SHEP_VERSION,
        "newest_writer": versions.SHEP_VERSION,
    }
    after = verify_pg_chain(pg_url)
    assert after.ok
    assert (after.events, after.head_hash) == (before.events, before.head_hash)
    EventStore(pg_url, on_notice=notices.append).close()
    assert len(notices) == 1


def test_a_new_shared_store_starts_at_the_current_schema(pg_url: str) -> None:
    """A new shared store is made at the current schema, and nothing says it was upgraded."""
    notices: list[str] = []
    with EventStore(pg_url, on_notice=notices.append) as store:
        assert store.schema.version == versions.STORE_SCHEMA_VERSION
    assert notices == []
    assert _meta(pg_url)["schema_version"] == str(versions.STORE_SCHEMA_VERSION)


def test_an_older_home_on_a_newer_shared_store_refuses_to_write(
    pg_url: str, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared store a newer shep (0.4.0) moved to schema 3: a home of this shep still reads
    it, but refuses every write with one line saying why (exit 5), and writes nothing."""
    with EventStore(pg_url) as store:
        store.append(_changes(2))
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE shep_meta SET value = '3' WHERE key = 'schema_version'")
        conn.execute("UPDATE shep_meta SET value = '0.4.0' WHERE key <> 'schema_version'")
    monkeypatch.setenv("SHEP_DATABASE_URL", pg_url)

    assert shep("status", "--all").returncode == 0
    refused = shep("settings", "set", "heartbeat_interval", "25")
    assert refused.returncode == 5
    assert refused.stderr == (
        f"shep: The shared store at {where(pg_url)} has schema 3, written by shep 0.4.0; "
        f"this is shep {versions.SHEP_VERSION} (schema {versions.STORE_SCHEMA_VERSION}), "
        "which does not write to a newer store: upgrade shep.\n"
    )
    assert verify_pg_chain(pg_url).events == 2
    with EventStore(pg_url) as store:
        assert store.schema.too_new is not None
        with pytest.raises(type(store.schema.too_new)), store.exclusive():
            pass
    assert _meta(pg_url)["newest_writer"] == "0.4.0"


def test_a_newer_sheps_event_on_the_shared_store_is_refused_naming_its_writer(
    pg_url: str, shep_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """shep 0.3.0 appends an event type this shep does not know to the shared store: a home
    of this shep copies it, and refuses it with one line naming shep 0.3.0 (the server
    says who wrote it; the home's copy does not), exit 5."""
    from tests.events.test_versions import RunTeleported

    monkeypatch.setenv("SHEP_DATABASE_URL", pg_url)
    with EventStore(pg_url) as store:
        store.append(_changes(1))
    assert shep("status", "--all").returncode == 0
    this = versions.SHEP_VERSION
    monkeypatch.setattr(versions, "SHEP_VERSION", "0.3.0")
    with EventStore(pg_url) as store:
        store.append(
            [RunTeleported(originator_id=SETTINGS_STREAM_ID, originator_version=2,
                           timestamp=utc_now(), to="mars")]
        )  # fmt: skip
    refused = shep("status", "--all")
    assert (refused.returncode, refused.stderr) == (
        5,
        f"shep: The shared store at {where(pg_url)} holds events.runs:RunTeleported events, "
        f"written by shep 0.3.0; this is shep {this}: upgrade shep.\n",
    )
