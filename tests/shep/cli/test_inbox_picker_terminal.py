"""The inbox picker on a real terminal of 80 and 40 columns: what a person approves is
shown whole, wrapped at words, never cut at the edge of the screen.

The gate is made at the store level (``tests.support.store_items``: its run waits,
no worker); `shep inbox` runs on a real pseudo-terminal (``tests.support.terminal``),
and the screen is read as a VT100 emulator shows it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from commands.suspend_run import Ask
from events.store import EventStore
from tests.shep.nodes.conftest import agent_log, fake_claude, repo, test_workflows
from tests.support.event_log import decisions_of, read_events
from tests.support.store_items import ask_on_new_run
from tests.support.terminal import Terminal

# Fixtures this folder's conftest does not give (they were beside these tests before the move).
__all__ = ["agent_log", "fake_claude", "repo", "test_workflows"]

#: A merge gate's summary as the feature workflow writes it, its verdict at the very end.
SUMMARY = (
    "Merge shep/add-a-low-stock-report-listing-items into main: 7 files changed, "
    "+99 -0 lines, 0 commits by the agent; tests: `python -m pytest -q` FAILED (exit 1)"
)


def assert_shown_whole(screen: list[str], text: str, width: int) -> None:
    """Every word of ``text`` is on the screen, in order; each that fits a line is on one
    line whole (a word wider than the screen can only run over its edge)."""
    shown = " ".join(" ".join(screen).split())
    squeezed = "".join(shown.split())
    assert "".join(text.split()) in squeezed, "\n".join(screen)
    for word in text.split():
        if len(word) < width - 4:
            assert any(word in line.split() for line in screen), (word, "\n".join(screen))


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 40])
def test_a_gates_summary_is_wrapped_whole_in_the_list_and_the_opened_item(
    store: EventStore, repo: Path, shep_home: Path, columns: int
) -> None:
    """`shep inbox` at 80 and 40 columns: the list row and the opened gate show the whole
    merge summary (down to `FAILED (exit 1)`), broken between words; quitting decides
    nothing.
    """
    gate = Ask(
        interrupt_id="merge",
        kind="approval",
        node="merge_gate",
        summary=SUMMARY,
        phase="implement",
    )
    _, [item] = ask_on_new_run(store, repo, [gate], resumed=False)
    terminal = Terminal("inbox", columns=columns, rows=60)
    try:
        terminal.expect("Inbox: 1 waiting")
        terminal.expect("FAILED")
        assert_shown_whole(terminal.display(), SUMMARY, columns)
        terminal.type("\r")
        terminal.expect("Approve: the run goes on")
        screen = terminal.display()
        opened = screen[: next(n for n, line in enumerate(screen) if "Approve: the run" in line)]
        assert_shown_whole(opened[-20:], SUMMARY, columns)
        terminal.type("\x1b")
        terminal.expect("Inbox: 1 waiting")
        terminal.type("q")
        assert terminal.wait(timeout=30) == 0
    finally:
        terminal.close()
    assert decisions_of(read_events(shep_home), item) == []
