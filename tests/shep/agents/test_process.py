"""The subprocess discipline every executor shares (shep/agents/process.py)."""

from __future__ import annotations

import signal
import time
import tracemalloc
from collections.abc import Generator, Iterator
from types import FrameType

import pytest

from events.errors import (
    AgentError,
    AgentNotFoundError,
    AgentOutputError,
    AgentRateLimitError,
    AgentTimeoutError,
)
from shep.agents import AgentOptions, Completed, ProcessLimits, TextDelta, create_executor
from tests.shep.agents.conftest import FAST, Fake, pid_gone, sample

PROMPT = "Say hello"


def test_defaults_are_five_seconds_grace_and_a_32_mib_cap() -> None:
    """Out of the box: SIGKILL 5 s after SIGTERM, 32 MiB of stdout held at most."""
    limits = ProcessLimits()
    assert limits.kill_grace == 5.0
    assert limits.output_cap == 32 * 1024 * 1024


def test_sigkill_follows_an_ignored_sigterm_after_the_grace_period(fake: Fake) -> None:
    """An agent that ignores SIGTERM is SIGKILLed once kill_grace has passed."""
    executor = fake.executor("claude-code", mode="hang", FAKE_IGNORE_TERM="1")
    started = time.monotonic()
    with pytest.raises(AgentTimeoutError):
        executor.execute(PROMPT, AgentOptions(timeout=0.3))
    elapsed = time.monotonic() - started
    assert 0.3 + 0.5 <= elapsed < 3
    assert all(pid_gone(pid) for pid in fake.pids())


def test_a_small_output_cap_bounds_memory(fake: Fake) -> None:
    """With a 1 MiB cap a 50 MB flood fails fast without buffering the flood."""
    limits = ProcessLimits(kill_grace=0.5, output_cap=1024 * 1024)
    executor = fake.executor("codex", mode="flood", limits=limits)
    tracemalloc.start()
    try:
        with pytest.raises(AgentOutputError) as caught:
            executor.execute(PROMPT, AgentOptions())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(caught.value) == (
        "Codex printed a line of more than 1 MiB on stdout (a line is held in memory whole); "
        "shep stopped it. If that is expected, raise the cap: shep settings set "
        "agent_output_mib N."
    )
    assert peak < 8 * 1024 * 1024


def test_the_default_cap_holds_memory_to_the_cap(fake: Fake) -> None:
    """A 50 MB flood at the default 32 MiB cap holds at most the cap (plus a little)."""
    executor = fake.executor("opencode", mode="flood", limits=ProcessLimits(kill_grace=0.5))
    tracemalloc.start()
    try:
        with pytest.raises(AgentOutputError):
            executor.execute(PROMPT, AgentOptions())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < ProcessLimits().output_cap + 8 * 1024 * 1024


_SMALL_CAP = ProcessLimits(kill_grace=0.5, linger=0.3, drain=0.3, output_cap=1024 * 1024)


def test_a_long_session_is_not_stopped_for_its_volume(fake: Fake) -> None:
    """6 MiB of stream-json lines, each handled as it comes, pass a 1 MiB cap: the cap bounds
    what is held in memory at once (a line, the lines read ahead), not the total printed.
    """
    executor = fake.executor(
        "claude-code",
        "claude-json.txt",
        stream="claude-stream-json.txt",
        mode="long",
        limits=_SMALL_CAP,
        FAKE_FLOOD_MB="6",
    )
    tracemalloc.start()
    try:
        events = list(executor.stream(PROMPT, AgentOptions()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(events[-1], Completed)
    assert events[-1].result.text == "Hello from the fake LLM. The answer is 42."
    assert sum(isinstance(e, TextDelta) for e in events) > 1000
    assert peak < 5 * 1024 * 1024  # far less than the 6 MiB printed


def test_a_json_document_past_the_cap_is_stopped_saying_how_to_raise_it(fake: Fake) -> None:
    """A format printed as one JSON document is held whole until it ends: past the cap it
    stops the agent, and the error names the setting that raises the cap.
    """
    executor = fake.executor(
        "gemini-cli", "gemini-json.txt", mode="long", limits=_SMALL_CAP, FAKE_FLOOD_MB="6"
    )
    with pytest.raises(AgentOutputError) as caught:
        executor.execute(PROMPT, AgentOptions())
    assert str(caught.value) == (
        "Gemini CLI printed a JSON document of more than 1 MiB (it is held in memory whole); "
        "shep stopped it. If that is expected, raise the cap: shep settings set "
        "agent_output_mib N"
    )
    assert all(pid_gone(pid) for pid in fake.pids())


def test_a_reader_that_falls_behind_holds_the_agent_back_not_its_output() -> None:
    """Lines read but not yet taken never exceed the cap: while the reader pauses, the agent
    waits on its full pipe instead of its output piling up in shep's memory; then every
    line arrives, in order.
    """
    import sys

    from shep.agents.process import AgentProcess

    script = "import sys\nfor i in range(40000): sys.stdout.write(f'{i:0199d}\\n')\n"
    process = AgentProcess(
        [sys.executable, "-c", script],
        stdin=None,
        env={"PATH": "/usr/bin:/bin"},
        cwd=None,
        limits=ProcessLimits(kill_grace=0.5, drain=0.3, output_cap=256 * 1024),
        timeout=30,
        agent="test",
        label="Test",
        install_hint="",
    )
    with process:
        lines = process.lines()
        first = next(lines)
        time.sleep(1.0)  # 8 MB at pipe speed is written in well under a second
        still_writing = process._require().poll() is None
        held = process._queued  # what the reader holds is the point
        rest = list(lines)
        outcome = process.finish()
    assert still_writing
    assert held <= 256 * 1024
    assert [int(x) for x in (first, *rest)] == list(range(40000))
    assert outcome.exit_code == 0
    assert outcome.stdout_bytes == 40000 * 200


def test_stream_delivers_events_while_the_agent_still_runs(fake: Fake) -> None:
    """stream() yields each event as its line arrives, not after the process exits."""
    executor = fake.executor(
        "gemini-cli", stream="gemini-stream-json.txt", mode="slow", FAKE_DELAY="0.15"
    )
    started = time.monotonic()
    events = executor.stream(PROMPT, AgentOptions())
    first = next(events)
    first_at = time.monotonic() - started
    rest = list(events)
    total = time.monotonic() - started
    assert type(first).__name__ == "SessionStarted"
    assert isinstance(rest[-1], Completed)
    assert first_at < total - 0.6  # seven lines, 0.15 s apart


def test_closing_a_stream_early_kills_the_agent(fake: Fake) -> None:
    """Abandoning stream() (GeneratorExit) kills the agent's process group at once."""
    executor = fake.executor(
        "claude-code", stream="claude-stream-json-partial.txt", mode="slow", FAKE_DELAY="1"
    )
    events = executor.stream(PROMPT, AgentOptions())
    assert isinstance(events, Generator)
    next(events)
    (pid,) = fake.pids()
    started = time.monotonic()
    events.close()
    assert time.monotonic() - started < 1.5
    assert pid_gone(pid)


@pytest.fixture
def interrupt_after() -> Iterator[None]:
    """Raise KeyboardInterrupt in the main thread after 0.5 s, like a Ctrl-C."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def test_keyboard_interrupt_kills_the_process_group(fake: Fake, interrupt_after: None) -> None:
    """Ctrl-C during execute() propagates, and the agent and its grandchild are killed."""
    executor = fake.executor("codex", mode="hang")
    with pytest.raises(KeyboardInterrupt):
        executor.execute(PROMPT, AgentOptions())
    assert all(pid_gone(pid) for pid in fake.pids())


def test_missing_binary_names_the_install_command(tmp_path: object) -> None:
    """A binary that is not installed raises AgentNotFoundError with the install hint."""
    executor = create_executor("gemini-cli", binary="/nonexistent/gemini", limits=FAST)
    with pytest.raises(AgentNotFoundError) as caught:
        executor.execute(PROMPT, AgentOptions())
    assert str(caught.value) == (
        "Gemini CLI: `/nonexistent/gemini` was not found. Install it with "
        "`npm install -g @google/gemini-cli`, or put it on PATH."
    )


def test_non_executable_binary_is_not_found(fake: Fake) -> None:
    """A binary without the execute bit raises AgentNotFoundError."""
    fake.binary.chmod(0o644)
    with pytest.raises(AgentNotFoundError, match="is not executable"):
        fake.executor("codex", "codex-exec-json.txt").execute(PROMPT, AgentOptions())


def test_missing_working_directory_is_a_clear_error(fake: Fake) -> None:
    """A cwd that does not exist fails before anything runs."""
    with pytest.raises(AgentError) as caught:
        fake.executor("codex", "codex-exec-json.txt").execute(
            PROMPT, AgentOptions(cwd="/nonexistent/project")
        )
    assert str(caught.value) == "Codex: the working directory /nonexistent/project does not exist."


@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini-cli", "qwen-code", "copilot"])
def test_long_prompts_go_whole_through_stdin(fake: Fake, agent: str) -> None:
    """A 300 KB prompt (past the 128 KiB argv limit) reaches stdin-reading agents intact."""
    prompt = "Refactor this:\n" + "x = 1\n" * 50_000
    outputs = {
        "claude-code": "claude-json.txt",
        "codex": "codex-exec-json.txt",
        "gemini-cli": "gemini-json.txt",
        "qwen-code": "qwen-json.txt",
        "copilot": "copilot-json.txt",
    }
    fake.executor(agent, outputs[agent]).execute(prompt, AgentOptions())
    assert fake.recorded()["stdin"] == prompt


def test_long_prompt_for_aider_goes_through_a_message_file(fake: Fake) -> None:
    """Aider cannot read stdin: a prompt past the argv limit goes via --message-file."""
    prompt = "y" * 200_000
    fake.executor("aider", "aider-message.txt").execute(prompt, AgentOptions())
    seen = fake.recorded()
    [arg] = [a for a in seen["argv"] if a.startswith("--message")]
    assert arg.startswith("--message-file=")
    assert seen["files"][arg] == prompt


@pytest.mark.parametrize("agent", ["continue", "cursor"])
def test_long_prompt_for_argv_only_agents_is_refused(fake: Fake, agent: str) -> None:
    """Agents that only take the prompt as an argument refuse one past the argv limit."""
    with pytest.raises(AgentError, match="takes its prompt on the command line"):
        fake.executor(agent, "continue-json.txt").execute("z" * 200_000, AgentOptions())


def test_a_token_echoed_back_by_the_api_is_masked_in_errors(fake: Fake) -> None:
    """If the API repeats the key in its error, the error message shows *** instead."""
    executor = fake.executor(
        "codex",
        "codex-exec-error-401-json.txt",
        token="sk-fake",
        stderr="codex-exec-error-401-json.stderr.txt",
        exit=1,
    )
    with pytest.raises(AgentError) as caught:
        executor.execute(PROMPT, AgentOptions())
    assert "sk-fake" not in str(caught.value)
    assert "Incorrect API key provided: ***." in str(caught.value)


def test_retryable_errors_are_rate_limits_and_timeouts(fake: Fake) -> None:
    """A 529 is retryable; the error says so through its class."""
    executor = fake.executor(
        "claude-code",
        "claude-error-529-json.txt",
        exit=1,
        stderr="claude-error-529-json.stderr.txt",
    )
    with pytest.raises(AgentRateLimitError) as caught:
        executor.execute(PROMPT, AgentOptions())
    assert caught.value.retryable is True


def test_stream_of_a_final_object_format_still_ends_with_the_answer_text(fake: Fake) -> None:
    """Continue prints one object: stream() gives its answer as a TextDelta, then Completed."""
    events = list(fake.executor("continue", "continue-json.txt").stream(PROMPT, AgentOptions()))
    assert [type(e) for e in events] == [TextDelta, Completed]
    assert isinstance(events[0], TextDelta)
    assert events[0].text == "Hello from the fake LLM. The answer is 42."


def test_samples_are_the_captured_files() -> None:
    """The fixture samples exist (the suite does not depend on /work/shared)."""
    assert sample("claude-json.txt").read_text().startswith('{"type":"result"')
