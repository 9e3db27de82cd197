"""Encoding events for the store: a batch's bytes are each event's own."""

from __future__ import annotations

from uuid import uuid4

import msgspec
import pytest

from events import catalog
from events.base import Event, utc_now
from events.catalog import ONE_CALL_EVENTS, encode_event, encode_events
from events.runs import AgentOutputRecorded, HeartbeatRecorded, RunCreated


def mixed_batch() -> list[Event]:
    """Events of several types and streams, with strings that hold newlines, quotes,
    braces and characters beyond ASCII: enough of them to be encoded in one call."""
    return [e for _ in range(ONE_CALL_EVENTS) for e in three_events()]


def three_events() -> list[Event]:
    run, other = uuid4(), uuid4()
    return [
        RunCreated(
            originator_id=run,
            originator_version=1,
            timestamp=utc_now(),
            workflow="w\nx",
            agent_type="demo",
            repo="/r/é",
            node_names=["a", "b"],
            created_by="me",
        ),
        AgentOutputRecorded(
            originator_id=run,
            originator_version=2,
            timestamp=utc_now(),
            node="a",
            kind="text",
            text='line one\nline "two"\r\n},{ \u2028 \U0001f600',
        ),
        HeartbeatRecorded(
            originator_id=other, originator_version=1, timestamp=utc_now(), pid=1, host="h"
        ),
    ]


def test_a_batch_encodes_to_each_events_own_bytes() -> None:
    """encode_events gives exactly encode_event's bytes, event by event, whatever the text."""
    batch = mixed_batch()
    assert encode_events(batch) == [encode_event(e) for e in batch]
    for few in (batch[:1], batch[:2], batch[: ONE_CALL_EVENTS - 1]):
        assert encode_events(few) == [encode_event(e) for e in few]


def test_a_batch_whose_lines_do_not_split_per_event_is_encoded_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Should the JSON lines ever hold a newline byte of their own, the batch is not split
    on it: each event is encoded alone, so no state is cut in two."""

    class Pretty:
        """An encoder whose lines hold a newline inside each event."""

        def __init__(self) -> None:
            self.inner = msgspec.json.Encoder()

        def encode(self, event: Event) -> bytes:
            return self.inner.encode(event)

        def encode_lines(self, events: list[Event]) -> bytes:
            return b"".join(self.inner.encode(e)[:-1] + b"\n}\n" for e in events)

    batch = mixed_batch()
    expected = [encode_event(e) for e in batch]
    monkeypatch.setattr(catalog, "_encoder", Pretty())
    assert encode_events(batch) == expected
