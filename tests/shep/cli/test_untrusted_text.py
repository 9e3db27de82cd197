"""Text shep did not write reaches a terminal escaped, never acting ("Trojan Source").

A description, an agent's output, a question's wording or another person's
answer may hold characters that act on a terminal instead of showing:
bidirectional overrides and isolates (U+202E, U+2066..U+2069) that reorder
what is read, zero-width and line-separator characters, ESC sequences, NUL,
CR. Every read command shows them as visible escapes (``\\u202e``, ``\\x1b``).
The history is written with the real commands into a real store; the CLI runs
in-process through ``shep.cli.main``, the one edge users meet.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from commands.answer_question import answer_question
from commands.record_agent_output import OutputItem, record_agent_output
from commands.resume_run import resume_run
from commands.run_state import load_run
from commands.suspend_run import Ask, suspend_run
from events.display import printable
from events.inbox import QuestionOption, item_stream_id
from events.store import EventStore
from shep.cli import main
from shep.home.identity import host_name
from shep.home.procs import process_start
from tests.shep.cli.test_feat_views import new_feature
from tests.shep.workflows.conftest import FeatureAgent, agent, git, repo
from tests.shep.workflows.test_feature_workflow import feat_new
from tests.support.cli import shep

# Fixtures this folder's conftest does not give (they were beside these tests before the move).
__all__ = ["agent", "repo"]

#: Each character that acts instead of showing, and how it must be shown.
ACTING = {
    "\u202e": "\\u202e",  # right-to-left override
    "\u202d": "\\u202d",  # left-to-right override
    "\u2066": "\\u2066",  # left-to-right isolate
    "\u2067": "\\u2067",  # right-to-left isolate
    "\u2068": "\\u2068",  # first strong isolate
    "\u2069": "\\u2069",  # pop directional isolate
    "\u200f": "\\u200f",  # right-to-left mark
    "\u200b": "\\u200b",  # zero-width space
    "\u2028": "\\u2028",  # line separator
    "\x1b": "\\x1b",  # ESC: starts every terminal escape sequence
    "\x00": "\\x00",
    "\r": "\\x0d",  # moves back to the start of the line, to overwrite it
    "\x07": "\\x07",
    "\x9b": "\\x9b",  # the one-character CSI of 8-bit terminals
}
#: A description as an attacker would write it: reads "access granted" reversed, and more.
HOSTILE = "Fix \u202edetnarg ssecca\u202c \u2066if admin\u2069 \x1b[2J\x1b]0;owned\x07 \u200bok\r"


def assert_escaped(text: str, where: str) -> None:
    for char, shown in ACTING.items():
        if char == "\r":
            continue  # the pipe capsys reads may carry none: checked as shown below
        assert char not in text, f"{where} printed {shown} raw:\n{text!r}"
    for shown in ("\\u202e", "\\u2066", "\\x1b[2J"):
        assert shown in text, (where, text)


def test_printable_escapes_each_acting_character_and_keeps_the_rest() -> None:
    """Each acting character becomes its escape; newlines, ordinary non-ASCII (accents,
    CJK, emoji, a no-break space) and printable text come back unchanged; tabs are spaces;
    a lone surrogate (an undecodable byte of a path) is escaped, not a crash on output.
    """
    for char, shown in ACTING.items():
        assert printable(f"a{char}b") == f"a{shown}b"
    plain = "naïve 東京 🚀\u00a0x\nline two"
    assert printable(plain) == plain
    assert printable("a\tb") == "a b"
    assert printable("dir/\udcff") == "dir/\\udcff"
    assert printable(42) == "42"


@pytest.fixture
def shep_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., str]:
    """``shep ARGS`` in this process: what it printed on stdout (and stderr), exit 0 checked."""
    monkeypatch.setenv("SHEP_ACTOR", "tester")

    def run(*args: str) -> str:
        capsys.readouterr()
        code = 0
        try:
            main(list(args))
        except SystemExit as e:
            code = int(e.code or 0)
        out = capsys.readouterr()
        assert code == 0, out
        return out.out + out.err

    return run


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def test_read_commands_show_acting_characters_escaped(
    shep_cli: Callable[..., str], store: EventStore, shep_home: Path, repo: Path
) -> None:
    """feat ls, feat show, inbox, status (list and one run), logs, replay and supervisor why
    show a hostile description, agent output, question, option and answer escaped.
    """
    run_id, _ = new_feature(store, shep_home, repo, HOSTILE)
    me = {"pid": os.getpid(), "host": host_name(), "process_start": process_start(os.getpid())}
    state = load_run(store, run_id)
    ask = Ask(interrupt_id="q0", kind="question", node="scope", question="Free text?")
    suspend_run(store, run_id, [ask], epoch=state.epoch)
    answered = item_stream_id(run_id, "q0")
    answer_question(store, answered, actor=f"user:{HOSTILE}", text=f"yes {HOSTILE}")
    resume_run(store, run_id, **me)
    record_agent_output(
        store, run_id, "analyze", [OutputItem(kind="text", text=f"agent says {HOSTILE}")]
    )
    state = load_run(store, run_id)
    suspend_run(
        store,
        run_id,
        [
            Ask(
                interrupt_id="q1",
                kind="question",
                node="clarify",
                question=f"Which? {HOSTILE}",
                options=[QuestionOption(id="a", label=f"pick {HOSTILE}", recommended=True)],
                context=f"because {HOSTILE}",
            )
        ],
        epoch=state.epoch,
    )
    short = run_id.hex[:8]
    for args in (
        ("feat", "ls"),
        ("feat", "show", short),
        ("inbox",),
        ("status",),
        ("status", short),
        ("logs", short),
        ("replay", short),
        ("supervisor", "why", answered.hex[:8]),
    ):
        shown = shep_cli(*args)
        assert "Started worker" not in shown  # nothing here may start the (made-up) run
        if args in (("status",), ("feat", "ls")):  # one line each: cut to its columns
            assert "\u202e" not in shown, shown
            assert "\x1b" not in shown, shown
            continue
        assert_escaped(shown, " ".join(args))


def test_an_agents_error_message_is_shown_escaped(tmp_path: Path, repo: Path) -> None:
    """An agent that fails with a right-to-left override in its last line: `shep run`
    says so (the progress line and the run's end) with the override escaped.
    """
    agent = tmp_path / "hostile-claude"
    agent.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "2.1.197 (Claude Code)"; exit 0; fi\n'
        "printf 'denied \\342\\200\\256detnarg\\n' >&2; exit 1\n"
    )
    agent.chmod(0o755)
    configured = shep("settings", "agent", "--agent", "claude-code", "--binary", str(agent))
    assert configured.returncode == 0, configured.stderr
    result = shep("run", "analyze-repository", "--repo", str(repo))
    assert result.returncode == 1, result.stderr
    assert "\u202e" not in result.stderr
    assert "denied \\u202edetnarg" in result.stderr
    assert result.stderr.count("\\u202e") == 2, result.stderr  # the node's line, the run's


@pytest.mark.slow
def test_the_squash_commit_subject_shows_acting_characters_escaped(
    repo: Path, agent: FeatureAgent
) -> None:
    """A feature whose description (and so the spec's one-liner) holds a right-to-left
    override and an ESC sequence is merged under a subject that `git log` shows escaped.
    """
    description = "Add \u202enigol\u202c page \x1b[2J now"
    result = feat_new(repo, "--allow-all", description=description)
    assert result.returncode == 0, result.stderr
    subject = git(repo, "log", "-1", "--format=%s")
    assert subject == "Add Add \\u202enigol\\u202c page \\x1b[2J now", subject
