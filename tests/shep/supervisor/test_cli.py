"""The supervisor's CLI as a user meets it: flags, policies, off, what-if, claimed identities.

Every command is the real CLI in a subprocess (``tests.support.cli.shep``); inbox
items are made at the store level (``tests.support.store_items``) on runs owned by
this test process, so no worker starts and nothing but the command under test
writes. A bad input is one line on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

import pytest

from commands.approve_item import approve_item
from commands.configure_agent import change_setting
from commands.create_run import create_run
from commands.policies import configure_policy
from commands.reject_item import reject_item
from commands.resume_run import resume_run
from commands.start_run import start_run
from commands.suspend_run import Ask, suspend_run
from events.base import utc_now
from events.features import TestsRan
from events.inbox import ApprovalGranted, ApprovalVoted, QuestionAnswered, item_stream_id
from events.store import EventStore
from events.supervisor import Guardrails, SupervisorDecisionMade
from shep.home.identity import host_name
from shep.home.procs import process_start
from shep.supervisor.evaluate import Evaluator
from shep.supervisor.loop import Supervisor
from tests.shep.supervisor.fake_evaluator import calls
from tests.shep.supervisor.test_process import Fake, evaluator, repo, tracked, workflows
from tests.support.cli import shep
from tests.support.event_log import read_events
from tests.support.store_items import REVIEW_NODES, ask_on_new_run, gate, question

__all__ = ["evaluator", "repo", "workflows"]

STORE_FILES = ("shep.db", "shep.db-wal")


def _one_line_error(result: subprocess.CompletedProcess[str], *, code: int = 2) -> str:
    """The command failed with ``code``: one ``shep:`` line on stderr, nothing on stdout."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("shep: "), lines
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return lines[0]


def _fingerprint(home: Path) -> dict[str, str | None]:
    """sha256 of the store and its write-ahead log (None: absent)."""
    return {
        name: hashlib.sha256((home / name).read_bytes()).hexdigest()
        if (home / name).exists()
        else None
        for name in STORE_FILES
    }


def _store(home: Path) -> EventStore:
    home.mkdir(mode=0o700, exist_ok=True)
    return EventStore(home / "shep.db")


def _settle(home: Path) -> None:
    """Projections caught up (what every command does first), so a read then writes nothing."""
    shep("status", check=True)


# -- feature flags ----------------------------------------------------------------------


def test_flags_on_an_empty_home_list_collaboration_off_and_create_nothing(
    shep_home: Path,
) -> None:
    """`shep settings flags` and `--json` on a home with no store: collaboration is off,
    and neither creates the store.
    """
    listed = shep("settings", "flags")
    assert listed.returncode == 0, listed.stderr
    [line] = listed.stdout.splitlines()
    assert line.split()[:2] == ["collaboration", "off"]
    as_json = shep("settings", "flags", "--json")
    assert as_json.returncode == 0, as_json.stderr
    [flag] = json.loads(as_json.stdout)
    assert (flag["name"], flag["enabled"]) == ("collaboration", False)
    assert flag["help"]
    assert not (shep_home / "shep.db").exists()


def test_flags_enable_and_disable_toggle_collaboration(shep_home: Path) -> None:
    """enable turns it on (listed on, in JSON too), disable turns it off again."""
    enabled = shep("settings", "flags", "enable", "collaboration")
    assert enabled.returncode == 0, enabled.stderr
    assert enabled.stdout.strip() == "collaboration = on"
    assert shep("settings", "flags", check=True).stdout.split()[:2] == ["collaboration", "on"]
    [flag] = json.loads(shep("settings", "flags", "--json", check=True).stdout)
    assert flag["enabled"] is True
    assert shep("supervisor", "show", check=True).stdout.startswith("collaboration: on")

    disabled = shep("settings", "flags", "disable", "collaboration")
    assert disabled.returncode == 0, disabled.stderr
    assert disabled.stdout.strip() == "collaboration = off"
    assert shep("settings", "flags", check=True).stdout.split()[:2] == ["collaboration", "off"]
    [flag] = json.loads(shep("settings", "flags", "--json", check=True).stdout)
    assert flag["enabled"] is False


@pytest.mark.parametrize("verb", ["enable", "disable"])
def test_unknown_flag_is_one_line_and_exit_2(shep_home: Path, verb: str) -> None:
    line = _one_line_error(shep("settings", "flags", verb, "telepathy"))
    assert "Unknown feature flag 'telepathy'" in line
    assert "collaboration" in line  # the known ones are named
    assert not (shep_home / "shep.db").exists()


# -- the flag off -----------------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--follow"], ["--background"]])
def test_supervisor_run_with_the_flag_off_on_an_empty_home_creates_nothing(
    shep_home: Path, extra: list[str]
) -> None:
    line = _one_line_error(shep("supervisor", "run", *extra))
    assert "shep settings flags enable collaboration" in line
    assert not (shep_home / "shep.db").exists()
    assert not (shep_home / "supervisor.lock").exists()


def test_supervisor_run_with_the_flag_off_leaves_the_store_byte_for_byte(
    shep_home: Path, repo: Path
) -> None:
    """A policy covers a pending gate, the flag is off: `shep supervisor run` (and with
    --follow) says so in one line, exits 2, and writes nothing: the store and its WAL are
    byte-identical, there is no tracking row and no supervisor event.
    """
    shep("supervisor", "configure", "--autonomy", "autonomous", check=True)
    with _store(shep_home) as store:
        ask_on_new_run(store, repo, [gate("g1")], resumed=False)
    _settle(shep_home)
    before = _fingerprint(shep_home)
    events = len(read_events(shep_home))
    for extra in ([], ["--follow"]):
        line = _one_line_error(shep("supervisor", "run", *extra))
        assert "The supervisor is off" in line
    assert _fingerprint(shep_home) == before
    assert len(read_events(shep_home)) == events
    assert tracked(shep_home) == 0
    assert not any(isinstance(e, SupervisorDecisionMade) for e in read_events(shep_home))


# -- configure and show -----------------------------------------------------------------


def _policy_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


#: A policy file's content, and what the one line says about it.
BAD_POLICY_FILES = {
    "unparsable.yaml": ("autonomy: [\n", "did not find expected node content"),
    "unknown-field.yaml": ("autonomy: cosign\ncolour: blue\n", "unknown field `colour`"),
    "misspelt-rule.yaml": (
        "autonomy: cosign\nguardrails:\n  max_diff_line: 3\n",
        "unknown guardrail 'max_diff_line'",
    ),
    "wrong-type.yaml": (
        "autonomy: cosign\nguardrails:\n  max_diff_lines: many\n",
        "Expected `int | null`, got `str`",
    ),
    "unknown-autonomy.yaml": ("autonomy: yolo\n", "Unknown autonomy 'yolo'"),
    "negative.yaml": (
        "autonomy: cosign\nguardrails:\n  max_files_changed: -1\n",
        "max_files_changed must be 0 or more",
    ),
    "zero-timeout.yaml": ("autonomy: cosign\ntimeout: 0\n", "timeout must be 1 to 86400"),
    "a-list.json": ("[1, 2]\n", "Expected `object`, got `array`"),
    "bad-override.yaml": (
        "autonomy: cosign\noverrides:\n  deploy: cosign\n",
        "Unknown item kind 'deploy'",
    ),
}

#: Options of `shep supervisor configure`, and what the one line says about them.
BAD_OPTIONS = [
    (["--autonomy", "reckless"], "Unknown autonomy 'reckless'; use one of advisory, cosign"),
    ([], "Give --autonomy"),
    (["--autonomy", "cosign", "--override", "merge"], "write KIND=AUTONOMY"),
    (["--autonomy", "cosign", "--override", "deploy=cosign"], "Unknown item kind 'deploy'"),
    (["--autonomy", "cosign", "--override", "merge=reckless"], "Unknown autonomy 'reckless'"),
    (["--autonomy", "cosign", "--scope", "planet:earth"], "Unknown scope 'planet:earth'"),
    (["--autonomy", "cosign", "--auto-approve"], "auto_approve needs at least one guardrail"),
    (["--policy", "missing.yaml"], "Cannot read policy file missing.yaml"),
    *[(["--policy", name], said) for name, (_, said) in BAD_POLICY_FILES.items()],
]


@pytest.mark.slow
def test_configure_bad_input_is_one_line_and_exit_2(
    shep_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each mistake is named in one line, exit 2, and no policy is recorded."""
    for name, (text, _) in BAD_POLICY_FILES.items():
        _policy_file(tmp_path, name, text)
    monkeypatch.chdir(tmp_path)
    for args, said in BAD_OPTIONS:
        line = _one_line_error(shep("supervisor", "configure", *args))
        assert said in line, (args, line)
    assert shep("supervisor", "show", "--json", check=True).stdout.strip() == "[]"


def test_configure_a_run_scope(shep_home: Path, repo: Path) -> None:
    """An unknown run is refused (on an empty home without creating the store, and once
    runs exist too); a known one, by its prefix, gets its policy."""
    line = _one_line_error(
        shep("supervisor", "configure", "--autonomy", "cosign", "--scope", "run:ffffffff")
    )
    assert "there are no runs yet" in line
    assert not (shep_home / "shep.db").exists()
    with _store(shep_home) as store:
        run, _ = ask_on_new_run(store, repo, [gate("g1")], resumed=False)
    line = _one_line_error(
        shep("supervisor", "configure", "--autonomy", "cosign", "--scope", "run:ffffffff")
    )
    assert "No run 'ffffffff'" in line
    assert json.loads(shep("supervisor", "show", "--json", check=True).stdout) == []
    set_ = shep("supervisor", "configure", "--autonomy", "cosign", "--scope", f"run:{run.hex[:8]}")
    assert set_.returncode == 0, set_.stderr
    assert set_.stdout.startswith(f"Policy run:{run.hex}@1 set: cosign")


def test_show_on_an_empty_home(shep_home: Path) -> None:
    as_json = shep("supervisor", "show", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stdout.strip() == "[]"
    assert shep("supervisor", "show", check=True).stdout.strip() == "No policy is set."
    assert not (shep_home / "shep.db").exists()


def test_show_lists_policies_most_general_first_and_marks_disabled_ones(
    shep_home: Path, repo: Path, tmp_path: Path
) -> None:
    """A global and a run policy (from a file, with overrides and rules): show lists both,
    `disable` marks the global one (disabled) in text and JSON, `enable` unmarks it, and
    a scope with no policy cannot be disabled.
    """
    with _store(shep_home) as store:
        run, _ = ask_on_new_run(store, repo, [gate("g1")], resumed=False)
    shep("supervisor", "configure", "--autonomy", "advisory", check=True)
    policy = _policy_file(
        tmp_path,
        "run.yaml",
        "autonomy: autonomous\noverrides:\n  merge: cosign\n"
        "guardrails:\n  max_diff_lines: 200\n  blocked_paths: ['*.lock']\ntimeout: 30\n",
    )
    shep(
        "supervisor", "configure", "--scope", f"run:{run.hex}", "--policy", str(policy), check=True
    )
    shown = shep("supervisor", "show", check=True).stdout.splitlines()
    assert shown == [
        "collaboration: off",
        "global@1: advisory, timeout 300s",
        f"run:{run.hex}@1: autonomous, merge cosign, at most 200 changed lines, "
        "blocked *.lock, timeout 30s",
    ]

    disabled = shep("supervisor", "disable")
    assert disabled.returncode == 0, disabled.stderr
    assert disabled.stdout.strip() == "Policy global@1 disabled."
    shown = shep("supervisor", "show", check=True).stdout.splitlines()
    assert shown[1] == "global@1  (disabled): advisory, timeout 300s"
    assert "(disabled)" not in shown[2]
    rows = {p["scope"]: p for p in json.loads(shep("supervisor", "show", "--json").stdout)}
    assert rows["global"]["enabled"] is False
    assert rows[f"run:{run.hex}"]["enabled"] is True
    assert rows[f"run:{run.hex}"]["guardrails"] == {
        "max_diff_lines": 200,
        "blocked_paths": ["*.lock"],
    }

    shep("supervisor", "enable", check=True)
    assert "(disabled)" not in shep("supervisor", "show", check=True).stdout
    line = _one_line_error(shep("supervisor", "disable", "--scope", f"run:{run.hex[:8]}x"))
    assert "No run" in line


def test_disable_a_scope_with_no_policy_is_one_line(shep_home: Path) -> None:
    shep("settings", "flags", "enable", "collaboration", check=True)
    line = _one_line_error(shep("supervisor", "disable"))
    assert "No policy for scope global" in line


# -- what-if ----------------------------------------------------------------------------


def _run_with(
    store: EventStore, repo: Path, asks: Sequence[Ask], *, tests_passed: bool | None
) -> list[UUID]:
    """A gated-review run of this process that ran its tests (if given), then asked; the
    run is handed back to this process, so deciding its items starts no worker."""
    me, host, started = os.getpid(), host_name(), process_start(os.getpid())
    run = create_run(
        store,
        workflow="gated-review",
        agent_type="claude-code",
        repo=str(repo),
        node_names=list(REVIEW_NODES),
        created_by="test",
        pid=me,
        host=host,
        process_start=started,
    )
    state = start_run(store, run, pid=me, host=host, process_start=started)
    if tests_passed is not None:
        store.append(
            [
                TestsRan(
                    originator_id=run,
                    originator_version=store.stream_version(run) + 1,
                    timestamp=utc_now(),
                    command="pytest -q",
                    exit_code=0 if tests_passed else 1,
                    passed=tests_passed,
                    duration_ms=1500,
                )
            ]
        )
    suspend_run(store, run, list(asks), epoch=state.epoch)
    resume_run(store, run, pid=me, host=host, process_start=started)
    return [item_stream_id(run, ask.interrupt_id) for ask in asks]


class _Approves:
    """An evaluator that approves every gate."""

    name = "stub"

    def __call__(self, prompt: str, *, model: str | None, timeout: float) -> str:
        return json.dumps({"verdict": "approve", "rationale": "fine"})


def _decided_history(store: EventStore, repo: Path) -> dict[str, UUID]:
    """Four decided items: a gate the supervisor approved (autonomous), then a gate alice
    approved, one bob rejected (all three after passing tests) and a question carol
    answered."""
    change_setting(store, key="collaboration", value="on", changed_by="test")
    configure_policy(
        store,
        "global",
        autonomy="autonomous",
        overrides={},
        guardrails=Guardrails(),
        model=None,
        timeout=60,
        actor="test",
    )
    [by_supervisor] = _run_with(store, repo, [gate("g")], tests_passed=True)
    evaluator: Evaluator = _Approves()
    Supervisor(store, evaluator).drain()
    [approved] = _run_with(store, repo, [gate("g")], tests_passed=True)
    approve_item(store, approved, actor="user:alice", comment="ok")
    [rejected] = _run_with(store, repo, [gate("g")], tests_passed=True)
    reject_item(store, rejected, actor="user:bob", reason="too broad")
    [answered] = _run_with(store, repo, [question("q")], tests_passed=None)
    from commands.answer_question import answer_question

    answer_question(store, answered, actor="user:carol", option_id="large")
    return {
        "supervisor": by_supervisor,
        "alice": approved,
        "bob": rejected,
        "carol": answered,
    }


@pytest.mark.slow
def test_what_if_reports_the_decisions_a_policy_would_change_and_writes_nothing(
    shep_home: Path, repo: Path, tmp_path: Path, evaluator: Fake
) -> None:
    """Past decisions (by the supervisor and by users) re-evaluated on guardrails only:
    a stricter policy (a rule whose metric these runs lack: fail closed) would leave the
    supervisor's approval to a person; a looser one (tests passed: auto-approve) would
    approve what bob rejected. --json gives one row per item; --with-llm consults the
    evaluator. None of it writes: the store and its WAL are byte-identical.
    """
    with _store(shep_home) as store:
        items = _decided_history(store, repo)
    by_supervisor = [
        e
        for e in read_events(shep_home)
        if isinstance(e, ApprovalGranted) and e.actor.startswith("supervisor:")
    ]
    assert [e.originator_id for e in by_supervisor] == [items["supervisor"]]
    strict = _policy_file(
        tmp_path, "strict.yaml", "autonomy: autonomous\nguardrails:\n  max_files_changed: 5\n"
    )
    loose = _policy_file(
        tmp_path,
        "loose.yaml",
        "autonomy: autonomous\nguardrails:\n  tests_must_pass: true\n  auto_approve: true\n",
    )
    _settle(shep_home)
    before = _fingerprint(shep_home)
    events = len(read_events(shep_home))

    stricter = shep("supervisor", "what-if", "--policy", str(strict))
    assert stricter.returncode == 0, stricter.stderr
    lines = stricter.stdout.splitlines()
    assert lines[-1] == "1 of 4 decisions would change under strict.yaml."
    assert lines[0].startswith(f"{items['supervisor'].hex[:8]}  ")
    assert "CHANGED" in lines[0]
    assert "was: approved by supervisor:global@1" in lines[0]
    assert "would: left to a person: escalate" in lines[0]
    assert "missing metrics (fail closed)" in lines[1]

    looser = shep("supervisor", "what-if", "--policy", str(loose), "--json")
    assert looser.returncode == 0, looser.stderr
    rows = {row["item"]: row for row in map(json.loads, looser.stdout.splitlines())}
    assert set(rows) == {item.hex for item in items.values()}
    changed = {who for who, item in items.items() if rows[item.hex]["changed"]}
    assert changed == {"bob"}
    assert rows[items["bob"].hex]["was"] == "rejected by user:bob"
    assert rows[items["bob"].hex]["would"] == "supervisor approves"
    assert rows[items["bob"].hex]["rules"] == [
        {"rule": "tests_must_pass", "passed": True, "detail": "`pytest -q` passed"}
    ]
    assert rows[items["alice"].hex]["verdict"] == "approve"
    assert rows[items["carol"].hex]["would"] == "up to the evaluator (--with-llm)"

    small = json.dumps({"verdict": "answer", "rationale": "smaller is safer", "answer": "small"})
    llm = shep(
        "supervisor", "what-if", "--policy", str(loose), "--with-llm", "--json",
        env={"FAKE_VERDICT": small},
    )  # fmt: skip
    assert llm.returncode == 0, llm.stderr
    rows = {row["item"]: row for row in map(json.loads, llm.stdout.splitlines())}
    # Gates that pass the rules are auto-approved without it; the question is asked.
    assert rows[items["carol"].hex]["would"] == "supervisor answers 'Small: one module'"
    assert rows[items["carol"].hex]["changed"] is True
    assert len([c for c in calls(evaluator.log) if c["phase"] == "start"]) == 1

    assert _fingerprint(shep_home) == before
    assert len(read_events(shep_home)) == events


def test_what_if_on_an_empty_home_and_with_a_bad_policy(shep_home: Path, tmp_path: Path) -> None:
    good = _policy_file(tmp_path, "good.yaml", "autonomy: cosign\n")
    empty = shep("supervisor", "what-if", "--policy", str(good), "--json")
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.strip() == "[]"
    bad = _policy_file(tmp_path, "bad.yaml", "autonomy: cosign\nguardrails:\n  max_lines: 1\n")
    _one_line_error(shep("supervisor", "what-if", "--policy", str(bad)))
    assert not (shep_home / "shep.db").exists()


# -- claimed identities -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "extra"),
    [
        ("approve", ["--as", "supervisor:x"]),
        ("approve", ["--as", "system:deadline"]),
        ("approve", ["--as", " Supervisor:x"]),
        ("reject", ["--as", "supervisor:global@1", "--reason", "no"]),
        ("answer", ["--as", "supervisor:x", "--option", "small"]),
    ],
)
def test_a_person_cannot_decide_as_the_supervisor(
    shep_home: Path, repo: Path, verb: str, extra: list[str]
) -> None:
    """`--as supervisor:…` (or system:…) is refused in one line, exit 2; nothing recorded."""
    with _store(shep_home) as store:
        _, [item] = ask_on_new_run(
            store, repo, [question("q") if verb == "answer" else gate("g")], resumed=False
        )
    before = len(read_events(shep_home))
    line = _one_line_error(shep(verb, item.hex[:8], *extra))
    assert "decide only through shep itself" in line
    events = read_events(shep_home)
    assert len(events) == before
    assert not any(
        isinstance(e, ApprovalGranted | ApprovalVoted | QuestionAnswered) for e in events
    )


@pytest.mark.parametrize("last_step", ["configure", "flag"])
def test_items_already_waiting_get_the_supervisor_once_it_can_decide_them(
    shep_home: Path, repo: Path, last_step: str
) -> None:
    """A gate asked before the policy (or before the flag): configuring the policy or turning
    the flag on starts the supervisor at once, and it decides the gate (the demo agent as the
    evaluator). The run is still this test process's, so no worker is started for it."""
    with _store(shep_home) as store:
        _, [item] = ask_on_new_run(store, repo, [gate("g")], resumed=True)
    shep("settings", "agent", "--agent", "demo", check=True)
    if last_step == "configure":
        shep("settings", "flags", "enable", "collaboration", check=True)
        done = shep("supervisor", "configure", "--autonomy", "autonomous", check=True)
    else:
        shep("supervisor", "configure", "--autonomy", "autonomous", check=True)
        done = shep("settings", "flags", "enable", "collaboration", check=True)
    assert "Started the supervisor for the 1 item(s) waiting in the inbox" in done.stdout
    assert _granted_by_supervisor(shep_home, item) == ["supervisor:global@1"]


def _granted_by_supervisor(home: Path, item: UUID, timeout: float = 30) -> list[str]:
    """The actors of the item's approval, once there is one (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        granted = [
            e.actor
            for e in read_events(home)
            if isinstance(e, ApprovalGranted) and e.originator_id == item
        ]
        if granted or time.monotonic() > deadline:
            return granted
        time.sleep(0.2)


def test_an_item_passed_over_while_its_policy_was_disabled_is_decided_once_enabled(
    shep_home: Path, repo: Path
) -> None:
    """The policy disabled, `supervisor run` reads the waiting gate and decides nothing;
    `enable` starts the supervisor for it, and it approves the gate (the demo agent as the
    evaluator). Then nothing is left: a run decides nothing, `enable` starts nothing."""
    with _store(shep_home) as store:
        _, [item] = ask_on_new_run(store, repo, [gate("g")], resumed=True)
    shep("settings", "agent", "--agent", "demo", check=True)
    shep("supervisor", "configure", "--autonomy", "autonomous", check=True)
    shep("supervisor", "disable", check=True)
    shep("settings", "flags", "enable", "collaboration", check=True)
    assert shep("supervisor", "run", check=True).stdout == "Nothing to decide.\n"

    enabled = shep("supervisor", "enable", check=True)

    assert enabled.stdout.splitlines() == [
        "Policy global@1 enabled.",
        "Started the supervisor for the 1 item(s) waiting in the inbox "
        "(its output: $SHEP_HOME/logs/supervisor.log).",
    ]
    assert _granted_by_supervisor(shep_home, item) == ["supervisor:global@1"]
    assert shep("supervisor", "run", check=True).stdout == "Nothing to decide.\n"
    assert shep("supervisor", "enable", check=True).stdout == "Policy global@1 enabled.\n"


def test_configure_starts_nothing_for_an_item_the_supervisor_already_escalated(
    shep_home: Path, repo: Path
) -> None:
    """A gate the supervisor escalated waits for a person: configuring a new policy version
    does not claim to start the supervisor for it, and a run leaves it alone."""
    with _store(shep_home) as store:
        _, [item] = ask_on_new_run(store, repo, [gate("g")], resumed=True)
    # The run has no worktree: the guardrail cannot be measured, and the gate is escalated.
    shep("supervisor", "configure", "--autonomy", "autonomous", "--max-files-changed", "5",
         check=True)  # fmt: skip
    with _store(shep_home) as store:
        change_setting(store, key="collaboration", value="on", changed_by="test")
    escalated = shep("supervisor", "run", check=True)
    assert "escalate under global@1" in escalated.stdout, escalated.stdout

    again = shep("supervisor", "configure", "--autonomy", "autonomous", check=True)

    assert again.stdout == "Policy global@2 set: autonomous, timeout 300s\n"
    assert shep("supervisor", "run", check=True).stdout == "Nothing to decide.\n"
    made = [
        e.decision
        for e in read_events(shep_home)
        if isinstance(e, SupervisorDecisionMade) and e.subject_id == item
    ]
    assert made == ["escalate"]
