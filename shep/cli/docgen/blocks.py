"""The generated blocks of a Markdown page: a marker line, then a fenced block.

A page marks each block a scenario writes with an HTML comment on the line
before its opening fence::

    <!-- generated: questions/status-waiting -->
    ```console
    $ shep status
    ...
    ```

``questions`` names the scenario, ``status-waiting`` its step. Markdown
renderers hide the comment; everything outside the marked blocks (the prose,
other blocks) is hand-written and never touched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

MARKER = re.compile(r"^<!-- generated: (?P<scenario>[\w-]+)/(?P<step>[\w-]+) -->\s*$")
_FENCE = re.compile(r"^(?P<fence>`{3,})[\w-]*\s*$")


class MarkerError(ValueError):
    """A marker that is not followed by a fenced block, or a step marked twice."""


@dataclass(frozen=True)
class Block:
    """One marked block: where it is (0-based line indexes) and what it holds now."""

    scenario: str
    step: str
    #: The marker's line.
    marker: int
    #: The first line after the opening fence, and the closing fence's line.
    start: int
    end: int
    text: str

    @property
    def name(self) -> str:
        return f"{self.scenario}/{self.step}"


def find_blocks(page: str, source: str = "page") -> list[Block]:
    """The marked blocks of ``page`` in page order; ``source`` names the page in errors."""
    lines = page.split("\n")
    blocks: list[Block] = []
    seen: set[str] = set()
    for n, line in enumerate(lines):
        marker = MARKER.match(line)
        if not marker:
            continue
        where = f"{source} line {n + 1}"
        opening = _FENCE.match(lines[n + 1]) if n + 1 < len(lines) else None
        if opening is None:
            raise MarkerError(f"{where}: a generated-block marker must be followed by a ``` fence")
        fence = opening["fence"]
        end = next(
            (m for m in range(n + 2, len(lines)) if lines[m].rstrip() == fence),
            None,
        )
        if end is None:
            raise MarkerError(f"{where}: the fenced block after the marker is never closed")
        block = Block(
            marker["scenario"], marker["step"], n, n + 2, end, "\n".join(lines[n + 2 : end])
        )
        if block.name in seen:
            raise MarkerError(f"{where}: {block.name} is marked twice")
        seen.add(block.name)
        blocks.append(block)
    return blocks


def replace_blocks(page: str, texts: Mapping[str, str], source: str = "page") -> str:
    """``page`` with the content of each marked block named in ``texts`` replaced."""
    lines = page.split("\n")
    # From the end, so that the earlier blocks' line indexes stay valid.
    for block in reversed(find_blocks(page, source)):
        if block.name in texts:
            new = texts[block.name].rstrip("\n")
            lines[block.start : block.end] = new.split("\n") if new else []
    return "\n".join(lines)
