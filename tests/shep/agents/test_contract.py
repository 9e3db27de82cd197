"""The executor contract, run against every agent type with its captured output.

Each executor drives a fake binary that replays the real CLI's stdout, stderr and
exit code (tests/shep/agents/samples), and records the argv, stdin and environment it got.
"""

from __future__ import annotations

import logging
import time

import pytest

from events.errors import AgentError, AgentExitError, AgentOutputError, AgentTimeoutError
from shep.agents import (
    AGENT_SPECS,
    AgentExecutor,
    AgentOptions,
    AgentResult,
    AgentUsage,
    Completed,
    SessionStarted,
    TextDelta,
    ToolResult,
    ToolUse,
)
from tests.shep.agents.cases import CASES, FAILURES, Case, Failure
from tests.shep.agents.conftest import TOKEN, Fake, pid_gone

PROMPT = "Say hello\nand mention the number 42."
OPTS = AgentOptions()

cases = pytest.mark.parametrize("case", CASES, ids=str)


def _call(executor: AgentExecutor, options: AgentOptions, *, stream: bool) -> None:
    if stream:
        list(executor.stream(PROMPT, options))
    else:
        executor.execute(PROMPT, options)


def _check_usage(usage: AgentUsage, expected: dict[str, object]) -> None:
    for name, value in expected.items():
        assert getattr(usage, name) == value, name


@cases
def test_execute_parses_the_answer_session_and_usage(fake: Fake, case: Case) -> None:
    """execute() turns the CLI's success output into an AgentResult with its own numbers."""
    expected = case.execute
    result = fake.executor(case.agent, expected.sample).execute(PROMPT, OPTS)
    assert type(result) is AgentResult
    assert result.text == expected.text
    assert result.session_id == expected.session_id
    assert result.turns == expected.turns
    _check_usage(result.usage, expected.usage)
    assert result.duration_ms >= 0
    assert result.structured_output is None
    assert isinstance(result.raw, dict)
    if case.json_output:
        assert result.raw


@cases
def test_stream_yields_normalized_events_ending_with_completed(fake: Fake, case: Case) -> None:
    """stream() yields SessionStarted/TextDelta events in order and Completed last."""
    expected = case.stream
    events = list(
        fake.executor(case.agent, case.execute.sample, stream=expected.sample).stream(PROMPT, OPTS)
    )
    assert isinstance(events[-1], Completed)
    assert not any(isinstance(e, Completed) for e in events[:-1])
    result = events[-1].result
    assert result.text == expected.text
    assert result.session_id == expected.session_id
    _check_usage(result.usage, expected.usage)
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(texts).strip() == expected.text
    started = [e for e in events if isinstance(e, SessionStarted)]
    if expected.session_id is not None:
        assert [s.session_id for s in started] == [expected.session_id]


@cases
def test_prompt_goes_to_stdin_or_argv_and_token_only_to_env(fake: Fake, case: Case) -> None:
    """The prompt is on stdin when the CLI reads it; the token is only in the child's env."""
    fake.executor(case.agent, case.execute.sample).execute(PROMPT, OPTS)
    seen = fake.recorded()
    if case.prompt_on_stdin:
        assert seen["stdin"] == PROMPT
        assert not any(PROMPT in arg for arg in seen["argv"])
    else:
        assert seen["stdin"] == ""
        assert any(arg.endswith(PROMPT) for arg in seen["argv"])
    assert not any(TOKEN in arg for arg in seen["argv"])
    assert TOKEN not in seen["stdin"]
    for var in AGENT_SPECS[case.agent].token_env:
        assert seen["env"][var] == TOKEN


@cases
def test_no_token_means_no_token_variable_is_set(fake: Fake, case: Case) -> None:
    """Without a token the child inherits the environment untouched (the CLI's own login)."""
    fake.executor(case.agent, case.execute.sample, token=None).execute(PROMPT, OPTS)
    env = fake.recorded()["env"]
    for var in AGENT_SPECS[case.agent].token_env:
        assert env.get(var) != TOKEN


@cases
def test_resume_passes_the_session_flags(fake: Fake, case: Case) -> None:
    """resume_session maps to the CLI's resume flag and the resumed answer is parsed."""
    options = AgentOptions(resume_session="SID")
    if case.resume is None:
        result = fake.executor(case.agent, case.execute.sample).execute(PROMPT, options)
        assert result.session_id is None
        assert not any("SID" in arg for arg in fake.argv())
        return
    result = fake.executor(case.agent, case.resume.sample).execute(PROMPT, options)
    argv = fake.argv()
    wanted = list(case.resume_args)
    assert any(argv[i : i + len(wanted)] == wanted for i in range(len(argv))), argv
    assert result.text == case.resume.text
    assert result.session_id == case.resume.session_id


@cases
def test_tool_calls_become_tool_use_and_tool_result(fake: Fake, case: Case) -> None:
    """A tool call in the output becomes ToolUse then ToolResult with the same id."""
    if case.tool is None:
        pytest.skip(f"{case.agent} reports no tool calls in its output")
    tool = case.tool
    events = list(fake.executor(case.agent, tool.sample, stream=tool.sample).stream(PROMPT, OPTS))
    uses = [e for e in events if isinstance(e, ToolUse)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(u.tool_id, u.name) for u in uses] == [(tool.tool_id, tool.name)]
    assert tool.input_key in uses[0].input
    assert [r.tool_id for r in results] == [tool.tool_id]
    assert results[0].output.startswith(tool.output_start)
    assert results[0].is_error is False
    assert events.index(uses[0]) < events.index(results[0])
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.result.text == tool.text


@pytest.mark.parametrize(
    ("case", "failure"), FAILURES, ids=[f"{c.agent}-{f.name}" for c, f in FAILURES]
)
def test_captured_failures_become_typed_errors(fake: Fake, case: Case, failure: Failure) -> None:
    """Each captured failure raises its exact error type carrying the agent's own message."""
    executor = fake.executor(
        case.agent,
        failure.stdout,
        stream=failure.stdout if failure.stream else None,
        stderr=failure.stderr,
        exit=failure.exit,
    )
    options = AgentOptions(resume_session=failure.resume)
    with pytest.raises(AgentError) as caught:
        _call(executor, options, stream=failure.stream)
    assert type(caught.value) is failure.error
    assert failure.message in str(caught.value)
    assert caught.value.agent == case.agent


@cases
def test_empty_output_is_an_output_error(fake: Fake, case: Case) -> None:
    """Exit 0 with nothing on stdout raises AgentOutputError."""
    with pytest.raises(AgentOutputError) as caught:
        fake.executor(case.agent).execute(PROMPT, OPTS)
    assert str(caught.value).endswith("exited without printing anything")


@cases
def test_truncated_output_is_an_output_error(fake: Fake, case: Case) -> None:
    """Output cut off mid-JSON (no final result) raises AgentOutputError with a snippet."""
    if not case.json_output:
        pytest.skip("plain-text output has no structure to truncate")
    executor = fake.executor(case.agent, case.execute.sample, mode="truncate", FAKE_TRUNCATE="90")
    with pytest.raises(AgentOutputError) as caught:
        executor.execute(PROMPT, OPTS)
    message = str(caught.value)
    assert message.startswith(AGENT_SPECS[case.agent].label)
    assert "truncated or invalid JSON: " in message or "without a final result; " in message
    assert "'{" in message or "'[" in message  # quotes the start of what was printed


@cases
def test_non_json_output_is_an_output_error(fake: Fake, case: Case) -> None:
    """Plain text where JSON is expected raises AgentOutputError quoting the text."""
    if not case.json_output:
        pytest.skip("plain text is this agent's output format")
    noise = fake.write("noise.txt", "Welcome! This is not JSON at all.\n")
    executor = fake.executor(case.agent, FAKE_STDOUT=str(noise))
    with pytest.raises(AgentOutputError) as caught:
        executor.execute(PROMPT, OPTS)
    assert "Welcome! This is not JSON at all." in str(caught.value)


@cases
def test_unrecognized_nonzero_exit_is_an_exit_error(fake: Fake, case: Case) -> None:
    """A non-zero exit with no recognizable error raises AgentExitError(code, stderr_tail)."""
    crash = fake.write("crash.txt", "Starting...\nSegmentation fault (core dumped)\n")
    executor = fake.executor(case.agent, FAKE_STDERR=str(crash), FAKE_EXIT="139")
    with pytest.raises(AgentExitError) as caught:
        executor.execute(PROMPT, OPTS)
    assert caught.value.code == 139
    assert "Segmentation fault (core dumped)" in caught.value.stderr_tail
    expected = f"{case.agent} exited with code 139: Segmentation fault (core dumped)"
    assert str(caught.value) == expected


@cases
def test_timeout_kills_the_whole_process_group(fake: Fake, case: Case) -> None:
    """Past options.timeout the agent and its grandchild are killed: AgentTimeoutError."""
    executor = fake.executor(case.agent, mode="hang")
    started = time.monotonic()
    with pytest.raises(AgentTimeoutError) as caught:
        executor.execute(PROMPT, AgentOptions(timeout=0.5))
    assert time.monotonic() - started < 3
    assert "did not finish within 0.5 s" in str(caught.value)
    assert caught.value.retryable is True
    agent_pid, grandchild_pid = fake.pids()
    assert pid_gone(agent_pid)
    assert pid_gone(grandchild_pid)


@cases
@pytest.mark.parametrize(
    "mode",
    [
        # The agent exits but leaves a grandchild holding stdout.
        "orphan-pipe",
        # The agent prints its final result and keeps running (stopped after linger).
        "linger",
    ],
)
def test_agent_that_does_not_let_go_is_answered_and_stopped(
    fake: Fake, case: Case, mode: str
) -> None:
    """A grandchild holding stdout, or an agent lingering after its result: shep returns
    the answer within seconds and no process of the agent's is left running."""
    if mode == "linger" and not case.json_output:
        pytest.skip("aider prints no final result marker; only its exit ends the run")
    executor = fake.executor(case.agent, case.execute.sample, mode=mode)
    started = time.monotonic()
    result = executor.execute(PROMPT, AgentOptions(timeout=20))
    assert time.monotonic() - started < 3
    assert result.text == case.execute.text
    assert all(pid_gone(pid) for pid in fake.pids())


@cases
def test_output_flood_is_capped(fake: Fake, case: Case) -> None:
    """A 50 MB line on stdout stops the agent with AgentOutputError at the default 32 MiB
    cap, saying how to raise it."""
    from shep.agents import ProcessLimits

    executor = fake.executor(case.agent, mode="flood", limits=ProcessLimits(kill_grace=0.5))
    with pytest.raises(AgentOutputError) as caught:
        executor.execute(PROMPT, OPTS)
    assert "printed a line of more than 32 MiB on stdout" in str(caught.value)
    assert "shep settings set agent_output_mib N" in str(caught.value)


@cases
def test_stderr_flood_does_not_deadlock(fake: Fake, case: Case) -> None:
    """8 MB on stderr before the answer: both pipes are drained, the call succeeds."""
    executor = fake.executor(case.agent, case.execute.sample, mode="stderr-flood")
    result = executor.execute(PROMPT, AgentOptions(timeout=20))
    assert result.text == case.execute.text


@cases
def test_unsupported_options_are_dropped_with_a_debug_line(
    fake: Fake, case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    """Options the agent cannot honour are logged at debug level and never fail the call."""
    executor = fake.executor(case.agent, case.execute.sample)
    handled = type(executor).handled  # type: ignore[attr-defined]
    every = AgentOptions(
        allowed_tools=("Read",),
        max_turns=3,
        model="some-model",
        system_prompt="Be brief.",
        timeout=20,
    )
    with caplog.at_level(logging.DEBUG, logger="shep.agents"):
        result = executor.execute(PROMPT, every)
    assert result.text == case.execute.text
    dropped = {"allowed_tools", "max_turns", "model", "system_prompt"} - handled
    for option in dropped:
        assert f"{case.agent}: dropping option {option} (not supported)" in caplog.text
    argv = fake.argv()
    if "system_prompt" not in handled:
        assert "Be brief." not in argv
    if "max_turns" not in handled:
        assert "3" not in argv


@cases
def test_working_directory_is_the_options_cwd(fake: Fake, case: Case) -> None:
    """options.cwd is the child's working directory."""
    work = fake.tmp / "work"
    work.mkdir()
    fake.executor(case.agent, case.execute.sample).execute(PROMPT, AgentOptions(cwd=str(work)))
    assert fake.recorded()["cwd"] == str(work)
