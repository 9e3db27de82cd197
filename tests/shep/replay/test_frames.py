"""The frames of real runs: their order and contents, as text and as JSON lines."""

from __future__ import annotations

import json
from typing import Any

from shep.replay import frames_from_store
from tests.shep.replay.conftest import APPROVAL, REJECTION, Recorded
from tests.support.cli import shep


def _json(*args: str) -> list[dict[str, Any]]:
    done = shep("replay", *args, "--json", check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_gated_run_frames_follow_the_log(history: Recorded) -> None:
    """A gated run reads as its story, in log order: created; draft; the question and its
    answer; check; the gate and its rejection; draft and check again (iteration 2); the
    gate and its approval; finish; completed. Positions only grow.
    """
    frames = _json(history.gated)
    assert [(f["kind"], f["node"], f["iteration"]) for f in frames] == [
        ("run", None, None),
        ("node", "draft", 1),
        ("question", "scope", 1),
        ("decision", "scope", 1),
        ("node", "check", 1),
        ("approval", "approve", 1),
        ("decision", "approve", 1),
        ("node", "draft", 2),
        ("node", "check", 2),
        ("approval", "approve", 2),
        ("decision", "approve", 2),
        ("node", "finish", 1),
        ("run", None, None),
    ]
    assert [f["index"] for f in frames] == list(range(1, 14))
    starts = [f["first_position"] for f in frames]
    assert starts == sorted(starts)
    assert all(f["first_position"] <= f["last_position"] for f in frames)
    assert frames[0]["title"].startswith("Run created: gated-review on ")
    assert frames[-1]["status"] == "completed"
    assert frames[-1]["title"].startswith("Run completed in ")


def test_node_frames_carry_output_usage_and_agent_time(history: Recorded) -> None:
    """A node frame has the agent's output lines (tool calls marked), its tokens, and the
    time it worked; waiting time is kept apart, on the decisions, and summed at the end.
    """
    frames = _json(history.gated)
    draft = frames[1]
    assert draft["status"] == "completed"
    assert "→ Glob" in draft["output"][0]
    assert "[demo agent: canned answers, not an AI]" in draft["output"]
    assert draft["usage"]["output_tokens"] > 0
    assert draft["agent_ms"] is not None
    assert draft["waited_ms"] is None
    decisions = [f for f in frames if f["kind"] == "decision"]
    assert all(f["waited_ms"] is not None and f["agent_ms"] is None for f in decisions)
    end = frames[-1]
    assert end["waited_ms"] == sum(f["waited_ms"] for f in decisions)
    assert end["agent_ms"] == sum(f["agent_ms"] for f in frames if f["kind"] == "node")


def test_decisions_say_who_when_what_and_why(history: Recorded) -> None:
    """Each decision frame names the actor, the moment, the verdict and the reason or
    answer given; the question and gate frames show what was asked.
    """
    frames = _json(history.gated)
    question, answered = frames[2], frames[3]
    assert question["title"] == "scope asks: How large should the change be?"
    assert "option small: Small: one module (recommended)" in question["output"]
    assert answered["decision"]["actor"] == "user:alice"
    assert answered["decision"]["verdict"] == "answered"
    assert answered["decision"]["answer"] == "Small: one module"
    assert answered["decision"]["option_id"] == "small"
    rejected, approved = frames[6], frames[10]
    assert rejected["decision"]["actor"] == "user:bob"
    assert rejected["decision"]["verdict"] == "rejected"
    assert rejected["decision"]["reason"] == REJECTION
    assert rejected["title"] == f"approve: rejected by user:bob: {REJECTION}"
    assert approved["decision"]["actor"] == "user:carol"
    assert approved["decision"]["verdict"] == "approved"
    assert approved["decision"]["reason"] == APPROVAL
    for decision in (answered, rejected, approved):
        assert decision["decision"]["at"] == decision["at"]
        assert decision["decision"]["item"] in " ".join(frames[decision["index"] - 2]["notes"])


def test_state_diffs_against_the_previous_checkpoint(history: Recorded) -> None:
    """Each frame's state diff is what its step changed: the draft's result added, the
    answer added, the rejection's feedback and verdict, then their change on approval.
    """
    frames = _json(history.gated)
    assert set(frames[0]["state"]["added"]) >= {"repo", "inputs", "results"}
    assert set(frames[1]["state"]["added"]) == {"results.draft", "iterations"}
    assert frames[3]["state"]["added"]["answers"] == '{"scope":"Small: one module"}'
    rejected = frames[6]["state"]
    assert rejected["added"]["verdicts"] == '{"approve":"rejected"}'
    assert json.loads(rejected["added"]["feedback"]) == {"draft": REJECTION}
    second_draft = frames[7]["state"]
    assert second_draft["changed"]["iterations.draft"] == ["1", "2"]
    assert "results.draft" in second_draft["changed"]
    approved = frames[10]["state"]
    assert approved["changed"]["verdicts.approve"] == ['"rejected"', '"approved"']
    assert approved["changed"]["feedback.draft"] == [json.dumps(REJECTION), '""']
    # The question waits at the checkpoint the draft left: forking there asks again.
    assert frames[2]["state"] is None
    assert frames[2]["checkpoint_id"] == frames[1]["checkpoint_id"]


def test_every_checkpointed_frame_prints_its_fork_command(history: Recorded) -> None:
    """A frame's fork command names the run and that frame's checkpoint (printed, not run)."""
    frames = _json(history.gated)
    for frame in frames:
        assert frame["checkpoint_id"]
        assert frame["fork_command"] == f"shep fork {history.gated} --at {frame['checkpoint_id']}"
    checkpoints = [f["checkpoint_id"] for f in frames if f["kind"] in ("node", "decision")]
    assert len(set(checkpoints)) == len(checkpoints)


def test_at_starts_the_json_lines_at_a_frame(history: Recorded) -> None:
    """--at N prints frames N to the end; --at last only the last; prefixes and dashes work."""
    every = _json(history.gated)
    assert _json(history.gated, "--at", "4") == every[3:]
    assert _json(history.gated[:6], "--at", "last") == every[-1:]
    dashed = f"{history.gated[:8]}-{history.gated[8:12]}"
    assert _json(dashed, "--at", "1") == every


def test_text_frames_when_not_on_a_terminal(history: Recorded) -> None:
    """Without a terminal and without --json the frames are printed as text, from --at."""
    done = shep("replay", history.gated, "--at", "7", check=True)
    text = done.stdout
    assert text.startswith(f"Run {history.gated}: gated-review on ")
    assert "13 frames" in text.splitlines()[0]
    assert "#7/13 [decision] approve: rejected by user:bob" in text
    assert "#6/13" not in text
    assert f"  reason: {REJECTION}" in text
    assert '~ verdicts.approve: "rejected" → "approved"' in text
    assert f"fork here: shep fork {history.gated} --at " in text


def test_feature_run_snapshots_and_their_diffs(history: Recorded) -> None:
    """A feature run's node frames carry the worktree snapshot after them and a diff stat
    against the previous snapshot (the base commit for the first), from the source repo.
    """
    frames = _json(history.feature)
    nodes = {f["node"]: f for f in frames if f["kind"] == "node"}
    assert list(nodes) == ["setup", "fast", "tests", "merge"]
    setup, fast, tests = nodes["setup"], nodes["fast"], nodes["tests"]
    assert any(n.startswith("worktree ") for n in setup["notes"])
    base = next(n for n in setup["notes"] if n.startswith("worktree ")).rsplit("(", 1)[1][:10]
    assert fast["snapshot"]
    assert fast["previous_snapshot"].startswith(base)
    assert "FEATURE-add-a-greeting-function.md" in fast["diff_stat"]
    assert "1 file changed" in fast["diff_stat"]
    assert tests["previous_snapshot"] == fast["snapshot"]
    assert tests["diff_stat"] == "no files changed"
    assert any(n.startswith("merged into main as ") for n in nodes["merge"]["notes"])


def test_a_snapshot_whose_repository_is_gone_says_so(history: Recorded) -> None:
    """When the source repository is no longer there, the frame says so instead of a diff."""
    replay = frames_from_store(history.home / "shep.db", history.feature)
    replay.summary.source_repo = str(history.home / "moved-away")
    fast = next(replay.frame(i) for i in range(1, len(replay) + 1) if replay.frames[i - 1].snapshot)
    assert fast.diff_stat is not None
    assert fast.diff_stat.startswith(f"the repository {history.home / 'moved-away'} is gone")


def test_plain_run_replays_too(history: Recorded) -> None:
    """analyze-repository: created, its four nodes with output, completed."""
    frames = _json(history.analyze)
    assert [f["node"] for f in frames] == [
        None,
        "scan",
        "dependencies",
        "patterns",
        "report",
        None,
    ]
    assert any(n.startswith("wrote ") for n in frames[4]["notes"])
    assert frames[-1]["status"] == "completed"
