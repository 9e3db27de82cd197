"""The saver passes LangGraph's checkpointer conformance suite, base and extended.

On both backends: the home's own SQLite store, and a shared PostgreSQL store
read through the home's verified copy (``projections.mirror``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)

from events.store import EventStore
from projections.mirror import copy_file, register
from shep.runs.checkpoints import EventStoreCheckpointSaver

IMPLEMENTED_EXTENDED = {"delete_for_runs", "copy_thread", "prune"}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, db_path: Path) -> Iterator[tuple[EventStore, Path]]:
    """The store the saver appends to and the database it reads, on either backend."""
    if request.param == "sqlite":
        with EventStore(db_path) as store:
            yield store, db_path
        return
    url = request.getfixturevalue("pg_url")
    copy = Path(copy_file(str(db_path.parent), url))
    register(str(copy), url)
    with EventStore(url) as store:
        yield store, copy


def test_conformance(backend: tuple[EventStore, Path]) -> None:
    """Every base capability passes, and so does every extended one the saver implements."""
    store, db_path = backend

    @checkpointer_test(name="EventStoreCheckpointSaver")
    async def factory() -> AsyncIterator[EventStoreCheckpointSaver]:
        saver = EventStoreCheckpointSaver(store, db_path)
        yield saver
        saver.close()

    report = asyncio.run(validate(factory))
    report.print_report()
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    assert {c.value for c in BASE_CAPABILITIES} <= set(report.results)
    extended = {c.value: report.results[c.value] for c in EXTENDED_CAPABILITIES}
    assert {name for name, r in extended.items() if r.detected} == IMPLEMENTED_EXTENDED
    assert all(r.passed for r in extended.values() if r.detected), failures
    assert report.conformance_level() == "FULL"
