"""The saver passes LangGraph's checkpointer conformance suite, base and extended."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)

from events.store import EventStore
from shep.checkpointer import EventStoreCheckpointSaver

IMPLEMENTED_EXTENDED = {"delete_for_runs", "copy_thread", "prune"}


def test_conformance(store: EventStore, db_path: Path) -> None:
    """Every base capability passes, and so does every extended one the saver implements."""

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
