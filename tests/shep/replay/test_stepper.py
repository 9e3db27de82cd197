"""The interactive stepper, driven through prompt-toolkit's pipe input in this process.

The keys are typed ahead and the pipe closed after them; the stepper's state
when it ends (q) says where each key took it.
"""

from __future__ import annotations

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from shep.cli.replay import Stepper, step_through
from shep.replay import Replay, frames_from_store
from tests.shep.replay.conftest import REJECTION, Recorded
from tests.support.terminal import Terminal

RIGHT = "\x1b[C"
LEFT = "\x1b[D"


def _step(history: Replay, keys: str, start: int = 1) -> Stepper:
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        return step_through(history, start, input=pipe, output=DummyOutput())


def _gated(history: Recorded) -> Replay:
    return frames_from_store(history.home / "shep.db", history.gated)


def test_next_and_previous(history: Recorded) -> None:
    """n and → go to the next frame, p and ← to the previous; the ends hold."""
    replay = _gated(history)
    assert _step(replay, "nnnpq").cursor == 3
    assert _step(replay, f"{RIGHT}{RIGHT}{LEFT}q").cursor == 2
    assert _step(replay, "ppq").cursor == 1
    assert _step(replay, "nnq", start=len(replay)).cursor == len(replay)


def test_search_finds_text_in_frames(history: Recorded) -> None:
    """/ and a text go to the next frame holding it (any case); / and Enter repeats."""
    replay = _gated(history)
    stepper = _step(replay, f"/{REJECTION.upper()}\rq")
    assert stepper.cursor == 7
    assert replay.frames[6].decision is not None
    assert stepper.message == f"/{REJECTION.upper()}: frame 7"
    again = _step(replay, "/approved by\r/\rq")
    assert [again.cursor, again.last_query] == [11, "approved by"]
    missing = _step(replay, "/no such words\rq")
    assert (missing.cursor, missing.message) == (1, "not found: no such words")


def test_g_jumps_to_a_node(history: Recorded) -> None:
    """g and a node's name go to its next frame (wrapping); a number goes to that frame."""
    replay = _gated(history)
    assert _step(replay, "gdraft\rq").cursor == 2
    assert _step(replay, "gdraft\rgdraft\rq").cursor == 8
    assert _step(replay, "gfin\rq").cursor == 12
    assert _step(replay, "g5\rq").cursor == 5
    unknown = _step(replay, "gnowhere\rq")
    assert (unknown.cursor, unknown.message) == (1, "no frame of a node named 'nowhere'")


def test_f_collects_the_fork_command_and_runs_nothing(history: Recorded) -> None:
    """f records the `shep fork` command of the frame under the cursor, to print on exit;
    nothing is forked (the store has no new run).
    """
    replay = _gated(history)
    stepper = _step(replay, "nfnnnnnnf/approved\rfq")
    second = replay.frames[1].checkpoint_id
    assert stepper.fork_commands == [
        f"shep fork {history.gated} --at {second}",
        f"shep fork {history.gated} --at {replay.frames[7].checkpoint_id}",
        f"shep fork {history.gated} --at {replay.frames[10].checkpoint_id}",
    ]
    after = frames_from_store(history.home / "shep.db", history.gated)
    assert len(after) == len(replay)
    assert [f.kind for f in after.frames if f.status == "forked"] == []


def test_escape_leaves_the_prompt(history: Recorded) -> None:
    """Ctrl-G leaves the search prompt without moving; the keys work again after it."""
    replay = _gated(history)
    stepper = _step(replay, "/draft\x07nq")
    assert (stepper.cursor, stepper.mode) == (2, None)


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 120])
def test_a_frame_is_wrapped_at_words_and_its_fork_command_stays_copyable(
    history: Recorded, columns: int
) -> None:
    """`shep replay RUN` on a real terminal: the frame pane wraps between words, never
    inside the checkpoint id or the run id; the fork command breaks only before `--at`,
    with a ` \\` so that it still runs when copied, and its lines joined are the command.
    """
    replay = _gated(history)
    command = replay.frames[0].fork_command
    assert command is not None
    checkpoint = replay.frames[0].checkpoint_id
    assert checkpoint is not None
    terminal = Terminal("replay", history.gated, columns=columns, rows=40)
    try:
        terminal.expect("fork here:")
        terminal.expect(checkpoint)
        screen = terminal.display()
        terminal.type("q")
        assert terminal.wait(timeout=30) == 0
    finally:
        terminal.close()
    pane = [line.split("│", 1)[1] if "│" in line else "" for line in screen]
    assert any(checkpoint in line for line in pane), "\n".join(screen)
    assert any(history.gated in line for line in pane), "\n".join(screen)
    at = next(n for n, line in enumerate(pane) if "fork here:" in line)
    shown = []
    for line in pane[at:]:
        part = line.strip().removeprefix("fork here:").strip()
        if part:
            shown.append(part)
        if part and not part.endswith("\\"):
            break
    assert " ".join(part.removesuffix("\\").strip() for part in shown) == command
    assert all(len(line) <= columns for line in screen)
