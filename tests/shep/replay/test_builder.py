"""Frames from hand-made histories: the cases a demo run does not reach."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import ormsgpack

from events.base import Event, utc_now
from events.catalog import encode_event, topic_of
from events.checkpoints import ChannelWrite, CheckpointSaved, WritesSaved
from events.inbox import QuestionAnswered, QuestionAsked, QuestionOption, item_stream_id
from events.runs import (
    AgentOutputRecorded,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunCreated,
    RunInterrupted,
    RunResumed,
    RunStarted,
)
from events.store import EventStore
from shep.replay import (
    OUTPUT_HEAD,
    OUTPUT_TAIL,
    checkpoint_state,
    decode_typed,
    diff_state,
    frames_from_store,
    load_frames,
    story,
)


class History:
    """One run's events, numbered and a millisecond apart, with their log positions."""

    def __init__(self) -> None:
        self.run = uuid4()
        self.version = 0
        self.start = utc_now()
        self.events: list[Event] = []

    def __call__(self, cls: type[Event], **fields: Any) -> History:
        self.version += 1
        self.events.append(
            cls(
                originator_id=self.run,
                originator_version=self.version,
                timestamp=self.start + timedelta(milliseconds=self.version),
                **fields,
            )
        )
        return self

    def created(self) -> History:
        return self(RunCreated, workflow="w", agent_type="demo", repo="/r", created_by="t")(
            RunStarted, pid=1, host="h"
        )

    def checkpoint(self, values: dict[str, Any], checkpoint_id: str | None = None) -> History:
        body = {"v": 4, "id": checkpoint_id or str(self.version), "channel_values": values}
        return self(
            CheckpointSaved,
            thread_id=self.run.hex,
            checkpoint_id=checkpoint_id or f"cp-{self.version}",
            checkpoint_type="msgpack",
            checkpoint=ormsgpack.packb(body),
            metadata_type="null",
            metadata=b"",
        )

    def rows(self) -> list[tuple[int, str, bytes]]:
        """As the store holds them: (position, topic, state)."""
        return [(n, topic_of(type(e)), encode_event(e)) for n, e in enumerate(self.events, 1)]


def _text(node: str, text: str) -> dict[str, Any]:
    return {"node": node, "kind": "text", "text": text}


def test_parallel_nodes_keep_their_own_output() -> None:
    """Two nodes running at once: each output line goes to its own node's frame, though the
    store's rows are read as one batch.
    """
    h = History().created()
    h(NodeStarted, node="a")(NodeStarted, node="b")
    for n in range(3):
        h(AgentOutputRecorded, **_text("a", f"a{n}"))(AgentOutputRecorded, **_text("b", f"b{n}"))
    h(NodeCompleted, node="a", duration_ms=5)(NodeCompleted, node="b", duration_ms=7)
    frames = load_frames(story(h.rows()))
    a, b = frames[1], frames[2]
    assert (a.node, a.output, a.agent_ms) == ("a", ["a0", "a1", "a2"], 5)
    assert (b.node, b.output, b.agent_ms) == ("b", ["b0", "b1", "b2"], 7)


def test_long_output_keeps_its_first_and_last_lines() -> None:
    """A node's output beyond OUTPUT_HEAD + OUTPUT_TAIL lines is cut in the middle, with a
    line saying how many were left out; long lines are cut with an ellipsis.
    """
    h = History().created()(NodeStarted, node="n")
    for n in range(100):
        h(AgentOutputRecorded, **_text("n", f"line {n}"))
    h(AgentOutputRecorded, **_text("n", "x" * 1000))
    h(AgentOutputRecorded, node="n", kind="tool_use", text='{"q":1}', tool_name="Grep")
    h(AgentOutputRecorded, node="n", kind="tool_result", text="one\ntwo\nthree", is_error=True)
    h(NodeCompleted, node="n", duration_ms=1)
    for events in (story(h.rows()), [(n, e) for n, e in enumerate(h.events, 1)]):
        output = load_frames(events)[1].output
        assert output[:OUTPUT_HEAD] == [f"line {n}" for n in range(OUTPUT_HEAD)]
        assert output[OUTPUT_HEAD] == f"… {103 - OUTPUT_HEAD - OUTPUT_TAIL} more lines not shown …"
        tail = output[OUTPUT_HEAD + 1 :]
        assert len(tail) == OUTPUT_TAIL
        assert tail[-3].endswith("…")
        assert len(tail[-3]) == 240
        assert tail[-2:] == ['→ Grep {"q":1}', "! ← one (+2 lines)"]


def test_interrupted_node_and_its_rerun_are_two_frames() -> None:
    """A worker lost mid-node leaves that frame interrupted; the re-run is a new frame."""
    h = History().created()(NodeStarted, node="n")(AgentOutputRecorded, **_text("n", "first"))
    h(RunInterrupted, reason="worker gone")(RunResumed, pid=2, host="h")
    h(NodeStarted, node="n")(AgentOutputRecorded, **_text("n", "second"))
    h(NodeCompleted, node="n", duration_ms=3)
    frames = load_frames([(n, e) for n, e in enumerate(h.events, 1)])
    assert [(f.kind, f.status) for f in frames] == [
        ("run", "created"),
        ("node", "interrupted"),
        ("run", "interrupted"),
        ("node", "completed"),
    ]
    assert frames[1].output == ["first"]
    assert frames[3].output == ["second"]
    assert frames[2].title == "Run interrupted: worker gone"
    assert any(note.startswith("resumed by worker 2") for note in frames[2].notes)


def test_a_failed_attempt_and_its_retry() -> None:
    """A failed attempt says why; the retry (attempt 2) is its own frame."""
    h = History().created()(NodeStarted, node="n")
    h(
        NodeFailed,
        node="n",
        duration_ms=4,
        error_type="AgentExitError",
        message="boom",
        retryable=True,
    )
    h(NodeStarted, node="n", attempt=2)(NodeCompleted, node="n", duration_ms=2)
    frames = load_frames([(n, e) for n, e in enumerate(h.events, 1)])
    assert [f.title for f in frames[1:]] == [
        "n: failed in 4 ms",
        "n (attempt 2): completed in 2 ms",
    ]
    assert frames[1].notes == ["failed: AgentExitError: boom (retryable)"]


def test_state_diff_between_checkpoints() -> None:
    """Each node's frame diffs the checkpoint after it against the one before it, dotted
    into dicts; LangGraph's own channels are left out.
    """
    h = History().created().checkpoint({"__start__": {"x": 1}, "results": {}, "keep": 1})
    h(NodeStarted, node="n")(NodeCompleted, node="n", duration_ms=1)
    h.checkpoint({"results": {"n": "done"}, "branch:to:m": None, "extra": [1, 2]})
    frames = load_frames([(n, e) for n, e in enumerate(h.events, 1)])
    assert frames[0].state is not None
    assert frames[0].state.added == {"results": "{}", "keep": "1"}
    node = frames[1].state
    assert node is not None
    assert node.added == {"results.n": '"done"', "extra": "[1,2]"}
    assert node.removed == {"keep": "1"}
    assert frames[1].checkpoint_id == "cp-5"
    assert frames[1].fork_command == f"shep fork {h.run.hex} --at cp-5"


def test_diff_state_is_bounded() -> None:
    """Values are cut to a short rendering, nesting stops at two levels, keys beyond the
    limit are counted.
    """
    before = {"a": {"b": {"c": 1}}, "text": "x"}
    after = {"a": {"b": {"c": 2}}, "text": "y" * 500, **{f"k{n}": n for n in range(60)}}
    diff = diff_state(before, after)
    assert diff.changed["a.b"] == ('{"c":1}', '{"c":2}')
    assert len(diff.changed["text"][1]) == 80
    assert len(diff.added) + len(diff.changed) == 40
    assert diff.omitted == 22


def test_checkpoint_values_are_decoded_without_langgraph() -> None:
    """LangGraph's extension types become plain values (a UUID's hex, a datetime's text, a
    model's fields, a set's items); unknown ones a placeholder; pickle is never loaded.
    """
    uid = UUID("12345678-1234-5678-1234-567812345678")

    def ext(code: int, *parts: Any) -> ormsgpack.Ext:
        return ormsgpack.Ext(code, ormsgpack.packb(parts))

    values = {
        "id": ext(0, "uuid", "UUID", uid.hex),
        "when": ext(3, "datetime", "datetime", "2026-01-02T03:04:05", "fromisoformat"),
        "tags": ext(0, "builtins", "set", ["a", "b"]),
        "path": ext(1, "pathlib", "PosixPath", ["/", "tmp", "x"]),
        "model": ext(5, "app.models", "Plan", {"steps": 3}, "model_validate_json"),
        "odd": ormsgpack.Ext(42, b"\x00\x01"),
        "array": ext(6, "float64", [2], "C", b"\x00" * 16),
    }
    body = ormsgpack.packb({"channel_values": values})
    event = CheckpointSaved(
        originator_id=uuid4(),
        originator_version=1,
        timestamp=utc_now(),
        thread_id="t",
        checkpoint_id="c",
        checkpoint_type="msgpack",
        checkpoint=body,
        metadata_type="null",
        metadata=b"",
    )
    assert checkpoint_state(event) == {
        "id": uid.hex,
        "when": "2026-01-02T03:04:05",
        "tags": ["a", "b"],
        "path": "/tmp/x",
        "model": {"_type": "app.models.Plan", "steps": 3},
        "odd": "<ext type 42, 2 bytes>",
        "array": "<numpy array>",
    }
    assert decode_typed("pickle", b"\x80\x04cos\nsystem\n.") == (
        "<pickle value, 14 bytes, not decoded>"
    )
    assert decode_typed("json", b'{"a": 1}') == {"a": 1}
    assert decode_typed("bytes", b"abc") == "<3 bytes>"


def test_topics_are_the_catalogs() -> None:
    """Every event class a replay reads is the catalog's, under the catalog's topic."""
    from events import catalog
    from shep import replay

    for topic, cls in replay.STORY_CLASSES.items():
        assert topic == catalog.topic_of(cls)
        assert catalog.EVENT_CLASSES[topic] is cls


def test_a_question_whose_node_start_came_first_is_one_frame() -> None:
    """However the item and its node's start are ordered, the question is one frame."""
    h = History().created()(NodeStarted, node="ask", kind="question")
    item = uuid4()
    asked = QuestionAsked(
        originator_id=item,
        originator_version=1,
        timestamp=utc_now(),
        run_id=h.run,
        node="ask",
        question="Which?",
        options=[QuestionOption(id="a", label="A", recommended=True)],
    )
    frames = load_frames([*((n, e) for n, e in enumerate(h.events, 1)), (99, asked)])
    assert [(f.kind, f.status, f.title) for f in frames[1:]] == [
        ("question", "waiting", "ask asks: Which?")
    ]


def test_items_found_from_interrupts_without_a_suspension(store: EventStore, db_path: Path) -> None:
    """A fork's reapplied decision is asked and decided without the run suspending: the
    item is found from the interrupt the run's checkpoint writes recorded.
    """
    h = History().created()(NodeStarted, node="ask", kind="question")
    interrupt = ormsgpack.Ext(
        2, ormsgpack.packb(["langgraph.types", "Interrupt", {"value": {}, "id": "int-1"}])
    )
    h(
        WritesSaved,
        checkpoint_id="cp",
        task_id="t",
        writes=[ChannelWrite(-3, "__interrupt__", "msgpack", ormsgpack.packb([interrupt]))],
    )
    item = item_stream_id(h.run, "int-1")
    origin_item = uuid4()
    asked = QuestionAsked(
        originator_id=item,
        originator_version=1,
        timestamp=utc_now(),
        run_id=h.run,
        node="ask",
        question="Which?",
    )
    answered = QuestionAnswered(
        originator_id=item,
        originator_version=2,
        timestamp=utc_now(),
        answer="A",
        actor="user:dana",
        run_id=h.run,
        node="ask",
        reapplied_from=origin_item,
    )
    store.append(h.events)
    store.append([asked, answered])
    h(NodeCompleted, node="ask", duration_ms=0, waited_ms=0)
    store.append(h.events[-1:])
    frames = frames_from_store(db_path, h.run.hex).frames
    decision = frames[-1]
    assert decision.kind == "decision"
    assert decision.decision is not None
    assert decision.decision.reapplied_from == origin_item.hex
    assert f"reapplied from item {origin_item.hex}" in decision.notes
