"""Record the agent's output stream, batched: many events per transaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from uuid import UUID

import msgspec

from commands.run_state import RunState, append_to_run
from events.runs import AgentOutputRecorded
from events.store import EventStore


class OutputItem(msgspec.Struct, frozen=True, kw_only=True):
    """One item of the normalized agent vocabulary, ready to record."""

    kind: str
    text: str = ""
    tool_name: str | None = None
    tool_id: str | None = None
    is_error: bool = False


def record_agent_output(
    store: EventStore,
    run_id: UUID,
    node: str,
    items: Sequence[OutputItem],
    *,
    epoch: int | None = None,
) -> RunState | None:
    """Append one event per item, all in one transaction. Nothing to do for no items."""
    if not items:
        return None
    state, _ = append_to_run(
        store,
        run_id,
        [
            (
                AgentOutputRecorded,
                {
                    "node": node,
                    "kind": item.kind,
                    "text": item.text,
                    "tool_name": item.tool_name,
                    "tool_id": item.tool_id,
                    "is_error": item.is_error,
                },
            )
            for item in items
        ],
        epoch=epoch,
    )
    return state


class AgentOutputBuffer:
    """Collects output items and records them when ``max_items`` pile up or ``max_delay`` passes.

    Agents can print thousands of lines a second; one transaction (and one
    sync) per batch keeps that cheap. Call ``flush()`` at node boundaries.
    """

    def __init__(
        self,
        store: EventStore,
        run_id: UUID,
        *,
        max_items: int = 200,
        max_delay: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        epoch: int | None = None,
    ) -> None:
        self._store = store
        self._run_id = run_id
        self._epoch = epoch
        self._max_items = max_items
        self._max_delay = max_delay
        self._clock = clock
        self._node = ""
        self._items: list[OutputItem] = []
        self._first_at = 0.0
        # Agents of parallel tasks share the buffer.
        self._lock = threading.RLock()

    def add(self, node: str, item: OutputItem) -> None:
        """Queue an item; flushes first if the node changed, after if the batch is due."""
        with self._lock:
            if self._items and node != self._node:
                self.flush()
            if not self._items:
                self._first_at = self._clock()
            self._node = node
            self._items.append(item)
            if (
                len(self._items) >= self._max_items
                or self._clock() - self._first_at >= self._max_delay
            ):
                self.flush()

    def flush(self) -> None:
        """Record whatever is queued."""
        with self._lock:
            items, self._items = self._items, []
            record_agent_output(self._store, self._run_id, self._node, items, epoch=self._epoch)
