"""eventsourcing's own recorder test cases, run against our apsw persistence module."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pytest
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    ProcessRecorder,
    TrackingRecorder,
)
from eventsourcing.tests.persistence import (
    AggregateRecorderTestCase,
    ApplicationRecorderTestCase,
    InfrastructureFactoryTestCase,
    NonInterleavingNotificationIDsBaseCase,
    ProcessRecorderTestCase,
    TrackingRecorderTestCase,
)
from eventsourcing.utils import Environment, get_topic

from events.sqlite import (
    ApswAggregateRecorder,
    ApswApplicationRecorder,
    ApswFactory,
    ApswProcessRecorder,
    ApswTrackingRecorder,
)
from events.sqlite_datastore import ApswDatastore


class _TempDatabase:
    """Each test gets a fresh database file, removed afterwards."""

    datastore: ApswDatastore

    def setUp(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        self.datastore = ApswDatastore(os.path.join(self._dir.name, "shep.db"))
        super().setUp()  # type: ignore[misc]

    def tearDown(self) -> None:
        super().tearDown()  # type: ignore[misc]
        self.datastore.close()
        self._dir.cleanup()


class TestApswAggregateRecorder(_TempDatabase, AggregateRecorderTestCase):
    def create_recorder(self) -> AggregateRecorder:
        recorder = ApswAggregateRecorder(self.datastore)
        recorder.create_table()
        return recorder


class TestApswApplicationRecorder(_TempDatabase, ApplicationRecorderTestCase):
    def create_recorder(self) -> ApplicationRecorder:
        recorder = ApswApplicationRecorder(self.datastore)
        recorder.create_table()
        return recorder

    def test_insert_subscribe(self) -> None:
        """The optional subscribe test of the library passes."""
        self.optional_test_insert_subscribe()


class TestApswTrackingRecorder(_TempDatabase, TrackingRecorderTestCase):
    def create_recorder(self) -> TrackingRecorder:
        recorder = ApswTrackingRecorder(self.datastore)
        recorder.create_table()
        return recorder


class TestApswProcessRecorder(_TempDatabase, ProcessRecorderTestCase):
    def create_recorder(self) -> ProcessRecorder:
        recorder = ApswProcessRecorder(self.datastore)
        recorder.create_table()
        return recorder


class TestApswNonInterleavingNotificationIDs(_TempDatabase, NonInterleavingNotificationIDsBaseCase):
    def create_recorder(self) -> ApplicationRecorder:
        recorder = ApswApplicationRecorder(self.datastore)
        recorder.create_table()
        return recorder


class _TrackingSubclass(ApswTrackingRecorder):
    pass


class TestApswInfrastructureFactory(InfrastructureFactoryTestCase[ApswFactory]):
    def setUp(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        self.env = Environment("TestCase")
        self.env[InfrastructureFactory.PERSISTENCE_MODULE] = get_topic(ApswFactory)
        self.env[ApswFactory.APSW_DBNAME] = os.path.join(self._dir.name, "shep.db")
        super().setUp()

    def tearDown(self) -> None:
        super().tearDown()
        self._dir.cleanup()

    def expected_factory_class(self) -> type[ApswFactory]:
        return ApswFactory

    def expected_aggregate_recorder_class(self) -> type[AggregateRecorder]:
        return ApswAggregateRecorder

    def expected_application_recorder_class(self) -> type[ApplicationRecorder]:
        return ApswApplicationRecorder

    def expected_tracking_recorder_class(self) -> type[TrackingRecorder]:
        return ApswTrackingRecorder

    def tracking_recorder_subclass(self) -> type[TrackingRecorder]:
        return _TrackingSubclass

    def expected_process_recorder_class(self) -> type[ProcessRecorder]:
        return ApswProcessRecorder

    def test_module_topic_resolves_to_one_factory(self) -> None:
        """PERSISTENCE_MODULE may name the module itself: it holds exactly one factory."""
        env: dict[str, Any] = {
            "PERSISTENCE_MODULE": "events.sqlite",
            "APSW_DBNAME": os.path.join(self._dir.name, "other.db"),
        }
        factory = InfrastructureFactory.construct(Environment("X", env))
        try:
            assert type(factory) is ApswFactory
        finally:
            factory.close()

    def test_missing_dbname_is_a_clear_error(self) -> None:
        """A factory without APSW_DBNAME says which keys it looked for."""
        with pytest.raises(OSError, match="APSW_DBNAME"):
            ApswFactory(Environment("Y", {}))
