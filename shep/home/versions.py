"""Which versions this shep writes, and which the home's store holds: ``shep --version``.

Cheap and harmless on purpose: nothing here imports LangGraph or eventsourcing's
application layer, and nothing is created. An empty home stays empty (no
``SHEP_HOME`` made, no ``shep.db``); a store is opened read-only, never
migrated, so asking a newer shep's version on an old home changes nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import apsw

from events import versions
from events.errors import ShepError
from events.migrations import SCHEMA_WRITERS, read_meta, recorded_schema
from events.postgres_url import redacted
from events.settings import AgentConfigured, SettingChanged
from events.sqlite_file import connect, store_error
from projections.state import stored_versions
from projections.tables import PROJECTION_VERSIONS

#: Seconds ``shep --version`` and ``shep doctor`` wait for the shared store's server.
SHARED_STORE_TIMEOUT = 3.0


@dataclass(frozen=True)
class WrittenVersions:
    """The versions of everything this shep stores (what it writes and reads natively)."""

    shep: str = versions.SHEP_VERSION
    store_schema: int = versions.STORE_SCHEMA_VERSION
    checkpoint_state: int = versions.CHECKPOINT_STATE_VERSION
    projections: dict[str, int] = field(default_factory=lambda: dict(PROJECTION_VERSIONS))
    #: The settings are events of the settings stream: their version is their classes'.
    settings: dict[str, int] = field(
        default_factory=lambda: {
            cls.__name__: cls.class_version for cls in (AgentConfigured, SettingChanged)
        }
    )


@dataclass(frozen=True)
class StoreVersions:
    """What the home's store says about itself.

    ``location``: the SQLite file, or the shared store's URL without its password.
    ``exists``: False for a home with no store yet (nothing is read, nothing made).
    ``schema``: the store's schema version (None: none yet, a file made by a reader before
    any event was written; see ``events.migrations.recorded_schema``); ``written_by``: the
    shep that made or last migrated it; ``newest_writer``: the newest shep that opened it to write.
    ``projections``: the version each local projection was built by (SQLite only).
    ``error``: why it could not be read (the rest is then unknown).
    """

    location: str
    shared: bool
    exists: bool
    schema: int | None = None
    written_by: str | None = None
    newest_writer: str | None = None
    projections: dict[str, int] = field(default_factory=dict)
    error: ShepError | None = None

    @property
    def schema_said(self) -> str:
        """``schema N``, or what a store file without a schema yet holds."""
        if self.schema is None:
            return "no events yet (the first one written records its schema)"
        return f"schema {self.schema}"


def get_store_versions(db_file: str, store_url: str | None) -> StoreVersions:
    """What the store of a home says about its versions, read-only (see the module)."""
    if store_url is not None:
        return _shared_store_versions(store_url)
    if not os.path.exists(db_file):
        return StoreVersions(db_file, shared=False, exists=False)
    try:
        conn = connect(db_file, readonly=True)
    except apsw.Error as e:
        return StoreVersions(db_file, shared=False, exists=True, error=store_error(e, db_file))
    try:
        schema = recorded_schema(conn)
        meta = read_meta(conn)
        projections = stored_versions(conn)
    except apsw.Error as e:
        return StoreVersions(db_file, shared=False, exists=True, error=store_error(e, db_file))
    except ShepError as e:
        return StoreVersions(db_file, shared=False, exists=True, error=e)
    finally:
        conn.close()
    return StoreVersions(
        db_file,
        shared=False,
        exists=True,
        schema=schema,
        written_by=meta.get("schema_written_by") or SCHEMA_WRITERS.get(schema or 0),
        newest_writer=meta.get("newest_writer") or SCHEMA_WRITERS.get(schema or 0),
        projections=projections,
    )


def _shared_store_versions(url: str) -> StoreVersions:
    from events.migrations import read_postgres_schema

    location = redacted(url)
    try:
        schema, meta = read_postgres_schema(url, connect_timeout=SHARED_STORE_TIMEOUT)
    except ShepError as e:
        return StoreVersions(location, shared=True, exists=True, error=e)
    if schema == 0:
        return StoreVersions(location, shared=True, exists=False)
    return StoreVersions(
        location,
        shared=True,
        exists=True,
        schema=schema,
        written_by=meta.get("schema_written_by") or SCHEMA_WRITERS.get(schema),
        newest_writer=meta.get("newest_writer") or SCHEMA_WRITERS.get(schema),
    )
