"""notify_command: each new inbox item is given to a real command, and what became of it is logged.

Real stores and real subprocesses: a command that records its stdin and argv,
one that fails, one that hangs (with a child of its own), a missing one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from uuid import UUID

import pytest

from commands.answer_question import answer_question
from commands.configure_agent import change_setting, configure_agent
from commands.create_run import create_run
from commands.start_run import start_run
from commands.suspend_run import Ask, suspend_run
from events.base import Event
from events.inbox import (
    ArtifactRef,
    NotificationFailed,
    NotificationSent,
    QuestionOption,
    notification_stream_id,
)
from events.store import EventStore
from shep.home.identity import host_name
from shep.home.notify import notify_new_items
from shep.home.procs import pid_alive
from shep.home.secrets import save_token
from shep.home.settings import load_settings
from tests.shep.nodes.conftest import agent_log, fake_claude, repo, test_workflows
from tests.support.cli import shep

# Fixtures this folder's conftest does not give (they were beside these tests before the move).
__all__ = ["agent_log", "fake_claude", "repo", "test_workflows"]

TOKEN = "sk-test-NOTIFY-0123456789-never-leak"


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


@pytest.fixture
def recorder(tmp_path: Path) -> Path:
    """A command that appends {argv, stdin} as one JSON line to the file named by its argv[1]."""
    return _script(
        tmp_path / "record-notification",
        "import json, sys\n"
        "data = sys.stdin.read()\n"
        "print('noise on stdout'); print('noise on stderr', file=sys.stderr)\n"
        "with open(sys.argv[1], 'a') as out:\n"
        "    out.write(json.dumps({'argv': sys.argv[2:], 'stdin': data}) + '\\n')\n",
    )


def _asks() -> list[Ask]:
    question = Ask(
        interrupt_id="q1",
        kind="question",
        node="requirements",
        iteration=2,
        question="How large should the change be?",
        context="The spec leaves it open.",
        options=[
            QuestionOption(id="small", label="Small", recommended=True),
            QuestionOption(id="large", label="Large", description="Every module"),
        ],
        default_after=3600,
    )
    gate = Ask(
        interrupt_id="g1",
        kind="approval",
        node="review",
        summary="Approve the plan?",
        phase="plan",
        artifacts=[ArtifactRef(path="shep-plan.md", sha256="ab" * 32)],
    )
    return [question, gate]


def suspended(store: EventStore, asks: list[Ask] | None = None) -> tuple[UUID, list[UUID]]:
    """A run suspended on new items (a question and a gate unless told); its id and theirs."""
    run_id = create_run(
        store,
        workflow="feature",
        agent_type="demo",
        repo="/src/app",
        node_names=["requirements", "review"],
        created_by="me",
    )
    state = start_run(store, run_id, pid=os.getpid(), host=host_name())
    _, item_ids = suspend_run(store, run_id, asks or _asks(), epoch=state.epoch)
    return run_id, item_ids


def _set(store: EventStore, **values: str) -> None:
    for key, value in values.items():
        change_setting(store, key=key, value=value, changed_by="me")


def _notifications(store: EventStore, item_id: UUID) -> list[Event]:
    return store.load(notification_stream_id(item_id))


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_new_item_is_written_to_the_command_as_one_json_object(
    store: EventStore, shep_home: Path, recorder: Path, tmp_path: Path
) -> None:
    """The question and the gate each reach the command's stdin as one JSON line, with
    the keys of `shep inbox --json` and the exact shep commands that decide it; each
    is recorded as NotificationSent on its own notification stream, with the run id.
    """
    out = tmp_path / "received.jsonl"
    command = f"{recorder} {out}"
    _set(store, notify_command=command)
    run_id, (question_id, gate_id) = suspended(store)
    notify_new_items(store, shep_home, [question_id, gate_id], load_settings(store))

    received = {json.loads(str(r["stdin"]))["kind"]: r for r in _lines(out)}
    question = json.loads(str(received["question"]["stdin"]))
    asked_at = question.pop("asked_at")
    deadline = question.pop("deadline")
    assert asked_at < deadline
    prefix = f"SHEP_HOME={shep_home} shep"
    q = question_id.hex
    assert question == {
        "item_id": q,
        "kind": "question",
        "run_id": run_id.hex,
        "workflow": "feature",
        "repo": "/src/app",
        "node": "requirements",
        "iteration": 2,
        "prompt": "How large should the change be?",
        "context": "The spec leaves it open.",
        "options": [
            {"id": "small", "label": "Small", "description": "", "recommended": True},
            {"id": "large", "label": "Large", "description": "Every module", "recommended": False},
        ],
        "free_text": True,
        "phase": None,
        "artifacts": [],
        "commands": {
            "answer": {
                "small": f"{prefix} answer {q} --option small",
                "large": f"{prefix} answer {q} --option large",
            },
            "answer_text": f"{prefix} answer {q} TEXT",
        },
    }
    gate = json.loads(str(received["approval"]["stdin"]))
    del gate["asked_at"]
    g = gate_id.hex
    assert gate == {
        "item_id": g,
        "kind": "approval",
        "run_id": run_id.hex,
        "workflow": "feature",
        "repo": "/src/app",
        "node": "review",
        "iteration": 1,
        "prompt": "Approve the plan?",
        "context": "",
        "options": [],
        "free_text": False,
        "phase": "plan",
        "artifacts": [{"kind": "file", "path": "shep-plan.md", "sha256": "ab" * 32}],
        "deadline": None,
        "commands": {
            "approve": f"{prefix} approve {g}",
            "reject": f"{prefix} reject {g} --reason REASON",
        },
    }
    for item_id in (question_id, gate_id):
        [event] = _notifications(store, item_id)
        assert isinstance(event, NotificationSent)
        assert (event.item_id, event.command, event.run_id) == (item_id, command, run_id)


def test_the_command_is_argv_never_a_shell(
    store: EventStore, shep_home: Path, recorder: Path, tmp_path: Path
) -> None:
    """Quotes group words as in a shell, but `$HOME`, `;` and `|` reach the command as text."""
    out = tmp_path / "received.jsonl"
    _set(store, notify_command=f"{recorder} {out} 'my phone' '$HOME' ';' 'echo hacked' '|'")
    _, item_ids = suspended(store)
    notify_new_items(store, shep_home, item_ids[:1], load_settings(store))
    assert [r["argv"] for r in _lines(out)] == [["my phone", "$HOME", ";", "echo hacked", "|"]]


def test_the_command_output_does_not_reach_the_caller(
    store: EventStore,
    shep_home: Path,
    recorder: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The command's stdout is discarded, its stderr captured: the worker's streams stay clean."""
    _set(store, notify_command=f"{recorder} {tmp_path / 'out.jsonl'}")
    _, item_ids = suspended(store)
    notify_new_items(store, shep_home, item_ids, load_settings(store))
    assert capfd.readouterr() == ("", "")


def test_a_failing_command_is_recorded_with_its_stderr(
    store: EventStore, shep_home: Path, tmp_path: Path
) -> None:
    """Exit 1: NotificationFailed with the status and the end of its stderr, on one line."""
    failing = _script(
        tmp_path / "fail",
        "import sys\nsys.stdin.read()\n"
        "print('connecting to the phone', file=sys.stderr)\n"
        "print('  boom: no route to host  ', file=sys.stderr)\nsys.exit(1)\n",
    )
    _set(store, notify_command=str(failing))
    run_id, item_ids = suspended(store)
    notify_new_items(store, shep_home, item_ids[:1], load_settings(store))
    [event] = _notifications(store, item_ids[0])
    assert isinstance(event, NotificationFailed)
    assert (event.command, event.run_id) == (str(failing), run_id)
    assert event.error == "exited with status 1: connecting to the phone / boom: no route to host"


def test_long_stderr_is_cut_to_its_end(store: EventStore, shep_home: Path, tmp_path: Path) -> None:
    """Only the last 500 characters of a chatty command's stderr are recorded."""
    chatty = _script(
        tmp_path / "chatty",
        "import sys\nsys.stderr.write('x' * 100000 + 'THE END')\nsys.exit(3)\n",
    )
    _set(store, notify_command=str(chatty))
    _, item_ids = suspended(store)
    notify_new_items(store, shep_home, item_ids[:1], load_settings(store))
    [event] = _notifications(store, item_ids[0])
    assert isinstance(event, NotificationFailed)
    assert event.error == "exited with status 3: ..." + ("x" * 493) + "THE END"


def test_a_hanging_command_is_killed_with_its_group_after_notify_timeout(
    store: EventStore, shep_home: Path, tmp_path: Path
) -> None:
    """A command that never exits (and started a child) is killed, group and all, after
    notify_timeout; the call returns within that bound and records the timeout.
    """
    pids = tmp_path / "pids"
    hanging = _script(
        tmp_path / "hang",
        "import os, subprocess, sys, time\nsys.stdin.read()\n"
        "child = subprocess.Popen(['sleep', '600'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(600)\n",
    )
    _set(store, notify_command=str(hanging), notify_timeout="1")
    _, item_ids = suspended(store)
    settings = load_settings(store)
    start = time.monotonic()
    notify_new_items(store, shep_home, item_ids[:1], settings)
    elapsed = time.monotonic() - start
    assert elapsed < 1 + 5
    [event] = _notifications(store, item_ids[0])
    assert isinstance(event, NotificationFailed)
    assert event.error == "timed out after 1s; killed"
    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 5
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(pid), pid


def test_items_are_notified_side_by_side(
    store: EventStore, shep_home: Path, tmp_path: Path
) -> None:
    """Three items with a command that hangs: one timeout for all, not one after another."""
    hanging = _script(tmp_path / "hang", "import time\ntime.sleep(600)\n")
    _set(store, notify_command=str(hanging), notify_timeout="2")
    asks = [
        Ask(interrupt_id=f"g{n}", kind="approval", node="review", summary=f"gate {n}")
        for n in range(3)
    ]
    _, item_ids = suspended(store, asks)
    start = time.monotonic()
    notify_new_items(store, shep_home, item_ids, load_settings(store))
    assert time.monotonic() - start < 3 * 2 - 1
    for item_id in item_ids:
        assert [type(e) for e in _notifications(store, item_id)] == [NotificationFailed]


def test_a_missing_command_is_recorded_not_raised(
    store: EventStore, shep_home: Path, tmp_path: Path
) -> None:
    """A program that does not exist: NotificationFailed naming it; nothing is raised."""
    missing = tmp_path / "nowhere" / "notifier"
    _set(store, notify_command=f"{missing} --loud")
    _, item_ids = suspended(store)
    notify_new_items(store, shep_home, item_ids[:1], load_settings(store))
    [event] = _notifications(store, item_ids[0])
    assert isinstance(event, NotificationFailed)
    assert event.error == f"{str(missing)!r} was not found: check notify_command"


def test_a_command_that_cannot_be_run_is_recorded(
    store: EventStore, shep_home: Path, tmp_path: Path
) -> None:
    """A file without the execute bit: NotificationFailed saying so."""
    plain = tmp_path / "notifier"
    plain.write_text("#!/bin/sh\n")
    _set(store, notify_command=str(plain))
    _, item_ids = suspended(store)
    notify_new_items(store, shep_home, item_ids[:1], load_settings(store))
    [event] = _notifications(store, item_ids[0])
    assert isinstance(event, NotificationFailed)
    assert event.error == f"{str(plain)!r} cannot be run (permission denied): check notify_command"


def test_a_command_that_does_not_read_stdin_still_counts(
    store: EventStore, shep_home: Path, tmp_path: Path
) -> None:
    """A command that exits 0 without reading its stdin (a closed pipe) was notified."""
    ignore = _script(tmp_path / "ignore", "pass\n")
    _set(store, notify_command=str(ignore))
    _, item_ids = suspended(store)
    notify_new_items(store, shep_home, item_ids, load_settings(store))
    for item_id in item_ids:
        assert [type(e) for e in _notifications(store, item_id)] == [NotificationSent]


def test_nothing_runs_without_a_notify_command(
    store: EventStore, shep_home: Path, recorder: Path, tmp_path: Path
) -> None:
    """notify_command empty (the default, or set back to ""): no command, no event."""
    _, item_ids = suspended(store)
    notify_new_items(store, shep_home, item_ids, load_settings(store))
    _set(store, notify_command=f"{recorder} {tmp_path / 'out.jsonl'}")
    _set(store, notify_command="")
    notify_new_items(store, shep_home, item_ids, load_settings(store))
    assert not (tmp_path / "out.jsonl").exists()
    assert [_notifications(store, i) for i in item_ids] == [[], []]


def test_notified_and_decided_items_are_not_notified(
    store: EventStore, shep_home: Path, recorder: Path, tmp_path: Path
) -> None:
    """An item notified already is not notified twice; one decided meanwhile not at all."""
    out = tmp_path / "out.jsonl"
    _set(store, notify_command=f"{recorder} {out}")
    _, (question_id, gate_id) = suspended(store)
    settings = load_settings(store)
    notify_new_items(store, shep_home, [gate_id], settings)
    answer_question(store, question_id, actor="me", option_id="small")
    notify_new_items(store, shep_home, [question_id, gate_id], settings)
    assert [json.loads(str(r["stdin"]))["item_id"] for r in _lines(out)] == [gate_id.hex]
    assert _notifications(store, question_id) == []
    assert len(_notifications(store, gate_id)) == 1


def test_tokens_never_reach_the_json_or_the_events(
    store: EventStore, shep_home: Path, recorder: Path, tmp_path: Path
) -> None:
    """An agent token quoted in a question, or echoed by a failing command, is masked."""
    configure_agent(
        store, agent_type="demo", auth_method="token", configured_by="me", token_configured=True
    )
    save_token(shep_home, "demo", TOKEN)
    out = tmp_path / "out.jsonl"
    ask = Ask(
        interrupt_id="leak",
        kind="question",
        node="requirements",
        question=f"Should I use {TOKEN}?",
        options=[QuestionOption(id="y", label="Yes", recommended=True)],
    )
    _set(store, notify_command=f"{recorder} {out}")
    _, item_ids = suspended(store, [ask])
    notify_new_items(store, shep_home, item_ids, load_settings(store))
    [received] = _lines(out)
    assert TOKEN not in str(received["stdin"])
    assert json.loads(str(received["stdin"]))["prompt"] == "Should I use ********?"

    leaky = _script(
        tmp_path / "leaky",
        f"import sys\nsys.stdin.read()\nprint('bad token {TOKEN}', file=sys.stderr)\nsys.exit(2)\n",
    )
    _set(store, notify_command=str(leaky))
    _, item_ids = suspended(store, [ask])
    notify_new_items(store, shep_home, item_ids, load_settings(store))
    [event] = _notifications(store, item_ids[0])
    assert isinstance(event, NotificationFailed)
    assert event.error == "exited with status 2: bad token ********"


def test_notifications_show_in_the_run_logs(
    store: EventStore, shep_home: Path, recorder: Path, tmp_path: Path
) -> None:
    """`shep logs RUN` shows `notified: COMMAND` and `notification failed: ERROR` (marked !)."""
    command = f"{recorder} {tmp_path / 'out.jsonl'}"
    _set(store, notify_command=command)
    run_id, (question_id, gate_id) = suspended(store)
    notify_new_items(store, shep_home, [question_id], load_settings(store))
    missing = tmp_path / "missing-notifier"
    _set(store, notify_command=str(missing))
    notify_new_items(store, shep_home, [gate_id], load_settings(store))
    lines = shep("logs", run_id.hex[:8], check=True).stdout.splitlines()
    tails = [line[9:] for line in lines if "notif" in line]
    assert tails == [
        f" notification.sent: notified: {command}",
        f"!notification.failed: notification failed: {str(missing)!r} was not found: "
        "check notify_command",
    ]
    logged = [
        json.loads(line)
        for line in shep("logs", run_id.hex[:8], "--json", check=True).stdout.splitlines()
    ]
    assert [(r["kind"], r["is_error"]) for r in logged if r["kind"].startswith("notif")] == [
        ("notification.sent", False),
        ("notification.failed", True),
    ]


def test_commands_name_shep_home_only_when_it_is_not_the_default(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the store in ~/.shep the commands are plain `shep ...`; elsewhere SHEP_HOME is set."""
    from commands.inbox_state import load_item
    from shep.home.notify import item_payload

    _, (_, gate_id) = suspended(store)
    item = load_item(store, gate_id)
    assert item is not None
    monkeypatch.setenv("HOME", str(tmp_path))
    plain = item_payload(item, None, tmp_path / ".shep")
    assert plain["commands"]["approve"] == f"shep approve {gate_id.hex}"
    assert (plain["workflow"], plain["repo"]) == (None, None)
    spaced = item_payload(item, None, tmp_path / "my home")
    assert spaced["commands"]["approve"] == (
        f"SHEP_HOME='{tmp_path}/my home' shep approve {gate_id.hex}"
    )
