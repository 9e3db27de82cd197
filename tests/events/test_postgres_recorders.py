"""eventsourcing's own recorder test cases, run against shep's PostgreSQL recorder.

The same library test classes as ``tests/events/test_persistence.py`` runs on
SQLite, subclassed here for the other backend, each on a fresh database of a
real PostgreSQL server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    ProcessRecorder,
    TrackingRecorder,
)
from eventsourcing.tests.persistence import (
    AggregateRecorderTestCase,
    ApplicationRecorderTestCase,
    NonInterleavingNotificationIDsBaseCase,
    ProcessRecorderTestCase,
    TrackingRecorderTestCase,
)

from events.postgres import PgAggregateRecorder, PgDatastore, PgProcessRecorder
from tests.support.postgres_server import PostgresServer


class _FreshDatabase:
    """Each test gets a new database on the session's server."""

    datastore: PgDatastore

    @pytest.fixture(autouse=True)
    def _database(self, pg_server: PostgresServer) -> Iterator[None]:
        self.datastore = PgDatastore(pg_server.database(), pool_size=4, max_overflow=16)
        yield
        self.datastore.close()

    def create_recorder(self) -> PgProcessRecorder:
        recorder = PgProcessRecorder(self.datastore)
        recorder.create_table()
        return recorder


class TestPgAggregateRecorder(_FreshDatabase, AggregateRecorderTestCase):
    def create_recorder(self) -> AggregateRecorder:
        recorder = PgAggregateRecorder(self.datastore)
        recorder.create_table()
        return recorder


class TestPgApplicationRecorder(_FreshDatabase, ApplicationRecorderTestCase):
    def create_recorder(self) -> ApplicationRecorder:
        return super().create_recorder()

    def test_insert_subscribe(self) -> None:
        """The optional subscribe test of the library passes (LISTEN/NOTIFY)."""
        self.optional_test_insert_subscribe()


class TestPgTrackingRecorder(_FreshDatabase, TrackingRecorderTestCase):
    def create_recorder(self) -> TrackingRecorder:
        return super().create_recorder()


class TestPgProcessRecorder(_FreshDatabase, ProcessRecorderTestCase):
    def create_recorder(self) -> ProcessRecorder:
        return super().create_recorder()


class TestPgNonInterleavingNotificationIDs(_FreshDatabase, NonInterleavingNotificationIDsBaseCase):
    def create_recorder(self) -> ApplicationRecorder:
        return super().create_recorder()
