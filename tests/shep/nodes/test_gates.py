"""Questions and approval gates, end to end: real workers that exit while a run waits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.shep.runs.conftest import agent_calls
from tests.shep.runs.test_background_recovery import run_row, wait_for
from tests.support.cli import shep


def _inbox() -> list[dict[str, object]]:
    return json.loads(shep("inbox", "--json", check=True).stdout)


def _start(repo: Path, workflow: str = "gated-review", *extra: str) -> str:
    result = shep("run", workflow, "--repo", str(repo), "--background", *extra, check=True)
    return result.stdout.strip()


def _pending(run_id: str) -> list[dict[str, object]]:
    return [i for i in _inbox() if i["run_id"] == run_id]


def _waiting_on(run_id: str, kind: str) -> dict[str, object]:
    """Wait until the run waits on exactly one pending item, of ``kind``; return it."""
    wait_for(
        lambda: (
            [i["kind"] for i in _pending(run_id)] == [kind]
            and str(run_row(run_id)["status"]).startswith("waiting")
        ),
        what=f"the run to wait for {kind}",
    )
    return _pending(run_id)[0]


@pytest.mark.slow
def test_happy_path_question_then_gate(repo: Path, fake_claude: Path, agent_log: Path) -> None:
    """draft runs, the question waits (no worker), the answer resumes it, the gate waits,
    the approval resumes it, finish runs, the run completes.
    """
    run_id = _start(repo)
    question = _waiting_on(run_id, "question")
    assert run_row(run_id)["status"] == "waiting_answer"
    assert question["prompt"] == "How large should the change be?"
    assert [o["id"] for o in question["options"]] == ["small", "large"]

    answered = shep("answer", str(question["item_id"])[:8], "--option", "small")
    assert answered.returncode == 0, answered.stderr
    gate = _waiting_on(run_id, "approval")
    assert run_row(run_id)["status"] == "waiting_approval"
    assert gate["artifacts"][0]["path"] == "shep-review.md"

    approved = shep("approve", run_id[:8], "--comment", "looks right")
    assert approved.returncode == 0, approved.stderr
    wait_for(lambda: run_row(run_id)["status"] == "completed", what="completion")
    assert [c["node"] for c in agent_calls(agent_log) if c["phase"] == "done"] == [
        "draft",
        "finish",
    ]
    assert "Scope: Small: one module" in (repo / "shep-review.md").read_text()
    assert _inbox() == []


@pytest.mark.slow
def test_an_artifact_that_is_a_link_out_of_the_repository_is_not_read(
    repo: Path, fake_claude: Path, tmp_path: Path
) -> None:
    """The file a gate asks to approve is a symbolic link to a file outside the repository:
    the inbox item names it with no hash, as a file that could not be read; the outside
    file's content (or its hash) is never what is approved.
    """
    import hashlib

    secret = tmp_path / "outside-secret.md"
    secret.write_text("the user's private notes\n")
    run_id = _start(repo, "linked-artifact", "--input", f"outside={secret}")
    gate = _waiting_on(run_id, "approval")
    assert gate["artifacts"] == [{"kind": "file", "path": "shep-review.md", "sha256": ""}]
    assert hashlib.sha256(secret.read_bytes()).hexdigest() not in json.dumps(_inbox())


@pytest.mark.slow
def test_escape_codes_in_answers_never_reach_a_terminal(
    repo: Path, fake_claude: Path, agent_log: Path
) -> None:
    """An answer holding terminal escape codes (another user's, in a shared log) is printed
    by `shep answer`, `shep inbox` and `shep logs` with its control characters escaped.
    """
    run_id = _start(repo)
    question = _waiting_on(run_id, "question")
    hostile = "\x1b]0;owned\x07pwn\x1b[2J"
    answered = shep("answer", str(question["item_id"])[:8], hostile)
    assert answered.returncode == 0, answered.stderr
    assert "\x1b" not in answered.stdout
    assert "\x07" not in answered.stdout
    assert "\\x1b]0;owned\\x07pwn\\x1b[2J" in answered.stdout
    _waiting_on(run_id, "approval")
    listing = shep("inbox", "--run", run_id[:8], check=True).stdout
    assert "\x1b" not in listing
    assert "\\x1b]0;owned\\x07pwn" in listing
    logs = shep("logs", run_id[:8], check=True).stdout
    assert "\x1b" not in logs
    assert "\x07" not in logs
