"""A frame's agent output as a person reads it: its first and last lines, how many fell
between, each tool call and result on a line of its own, long lines cut."""

from __future__ import annotations

from collections import deque

from events.catalog import decode_event, topic_of
from events.runs import AgentOutputRecorded
from events.words import counted
from shep.replay.state import cut_text

#: A frame keeps this many lines of agent output from its start, and this many from its end.
OUTPUT_HEAD = 40
OUTPUT_TAIL = 20
#: Longer lines are cut here, with an ellipsis.
LINE_LIMIT = 240
OUTPUT_TOPIC = topic_of(AgentOutputRecorded)
#: An item of a frame's output: a line of ours, an output event, or one's stored bytes.
OutputItem = str | AgentOutputRecorded | bytes


class OutputLines:
    """A frame's output as it grows: its first and last items, and how many fell between."""

    def __init__(self) -> None:
        self.head: list[OutputItem] = []
        self.tail: deque[OutputItem] = deque(maxlen=OUTPUT_TAIL)
        self.dropped = 0

    def add(self, item: OutputItem) -> None:
        if len(self.head) < OUTPUT_HEAD:
            self.head.append(item)
            return
        if len(self.tail) == OUTPUT_TAIL:
            self.dropped += 1
        self.tail.append(item)

    def extend(self, items: list[bytes]) -> None:
        room = OUTPUT_HEAD - len(self.head)
        if room > 0:
            self.head.extend(items[:room])
            items = items[room:]
        self.dropped += max(0, len(self.tail) + len(items) - OUTPUT_TAIL)
        self.tail.extend(items[-OUTPUT_TAIL:])

    def lines(self) -> list[str]:
        head = [line for item in self.head for line in output_lines(item)]
        tail = [line for item in self.tail for line in output_lines(item)]
        dropped = self.dropped
        if len(head) > OUTPUT_HEAD:
            dropped += len(head) - OUTPUT_HEAD
            head = head[:OUTPUT_HEAD]
        if len(tail) > OUTPUT_TAIL:
            dropped += len(tail) - OUTPUT_TAIL
            tail = tail[-OUTPUT_TAIL:]
        middle = [f"… {counted(dropped, 'more line')} not shown …"] if dropped else []
        return [*head, *middle, *tail]


def output_lines(item: OutputItem) -> list[str]:
    """An output item as the lines a person reads: text, ``→ tool input``, ``← result``."""
    if isinstance(item, str):
        return [cut_text(item, LINE_LIMIT)]
    event = decode_event(OUTPUT_TOPIC, item) if isinstance(item, bytes) else item
    assert isinstance(event, AgentOutputRecorded)
    mark = "! " if event.is_error else ""
    if event.kind == "tool_use":
        lines = [f"{mark}→ {event.tool_name or 'tool'} {event.text}".rstrip()]
    elif event.kind == "tool_result":
        first, _, rest = event.text.partition("\n")
        more = f" (+{counted(rest.count(chr(10)) + 1, 'line')})" if rest else ""
        lines = [f"{mark}← {first}{more}"]
    else:
        lines = [f"{mark}{line}" for line in event.text.splitlines() or [""]]
    return [cut_text(line, LINE_LIMIT) for line in lines]
