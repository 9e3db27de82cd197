"""Per-agent specifics: the exact argv for each option, and format details."""

from __future__ import annotations

import json
import logging

import pytest

from events.errors import AgentOutputError
from shep.agents import AgentOptions, Completed, SessionStarted, TextDelta, ToolResult, ToolUse
from tests.shep.agents.conftest import Fake, sample

PROMPT = "Say hello"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
EVERYTHING = AgentOptions(
    resume_session="SID",
    allowed_tools=("Read", "Write"),
    max_turns=3,
    model="the-model",
    system_prompt="Be brief.",
    output_schema=SCHEMA,
)


def _argv(
    fake: Fake, agent: str, sample: str, options: AgentOptions, stream: bool = False
) -> list[str]:
    executor = fake.executor(agent, sample, stream=sample if stream else None)
    try:
        if stream:
            list(executor.stream(PROMPT, options))
        else:
            executor.execute(PROMPT, options)
    except AgentOutputError:
        pass  # some samples do not answer with JSON; only argv matters here
    return fake.argv()


# -- argv, every agent ----------------------------------------------------------------------

SCHEMA_ARG = json.dumps(SCHEMA, separators=(",", ":"))

# (agent, sample, options, stream, argv, stdin). Codex and Continue have their own
# argv tests below: a schema file, a config file named in the environment.
ARGV = [
    # claude -p --output-format json plus one flag per option; prompt on stdin.
    pytest.param(
        "claude-code",
        "claude-structured-output-json.txt",
        EVERYTHING,
        False,
        [
            "-p",
            "--output-format",
            "json",
            "--resume",
            "SID",
            "--allowedTools",
            "Read,Write",
            "--append-system-prompt",
            "Be brief.",
            "--json-schema",
            SCHEMA_ARG,
            "--model",
            "the-model",
            "--max-turns",
            "3",
        ],
        PROMPT,
        id="claude-code",
    ),
    # stream() asks for stream-json with --verbose and partial messages.
    pytest.param(
        "claude-code",
        "claude-stream-json.txt",
        AgentOptions(),
        True,
        ["-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages"],
        PROMPT,
        id="claude-code-stream",
    ),
    # gemini --output-format json ... -p '': the prompt on stdin, -p keeps it headless.
    pytest.param(
        "gemini-cli",
        "gemini-resume-json.txt",
        EVERYTHING,
        False,
        [
            "--output-format",
            "json",
            "--model",
            "the-model",
            "--resume",
            "SID",
            "--allowed-tools=Read",
            "--allowed-tools=Write",
            "--approval-mode",
            "yolo",
            "-p",
            "",
        ],
        PROMPT,
        id="gemini-cli",
    ),
    # qwen maps every option, system prompt and turn limit included.
    pytest.param(
        "qwen-code",
        "qwen-structured-output-json.txt",
        EVERYTHING,
        False,
        [
            "--output-format",
            "json",
            "--resume",
            "SID",
            "--model",
            "the-model",
            "--allowed-tools=Read",
            "--allowed-tools=Write",
            "--approval-mode",
            "yolo",
            "--append-system-prompt",
            "Be brief.",
            "--max-session-turns",
            "3",
            "--json-schema",
            SCHEMA_ARG,
        ],
        PROMPT,
        id="qwen-code",
    ),
    # opencode run --format json --session SID --model M; the prompt on stdin.
    pytest.param(
        "opencode",
        "opencode-run-resume-json.txt",
        EVERYTHING,
        False,
        ["run", "--format", "json", "--session", "SID", "--model", "the-model"],
        PROMPT,
        id="opencode",
    ),
    # aider --yes-always --no-git --no-pretty ... --message=PROMPT; read-only -> --dry-run.
    pytest.param(
        "aider",
        "aider-message.txt",
        AgentOptions(model="openai/fake-model", allowed_tools=("Read",)),
        False,
        [
            "--yes-always",
            "--no-git",
            "--no-pretty",
            "--no-check-update",
            "--model",
            "openai/fake-model",
            "--dry-run",
            f"--message={PROMPT}",
        ],
        "",
        id="aider",
    ),
    # cursor-agent -p --output-format json --trust ... -- PROMPT.
    pytest.param(
        "cursor",
        "cursor-doc-json.txt",
        EVERYTHING,
        False,
        [
            "-p",
            "--output-format",
            "json",
            "--trust",
            "--model",
            "the-model",
            "--resume=SID",
            "--force",
            "--",
            PROMPT,
        ],
        "",
        id="cursor",
    ),
    # copilot --output-format json --no-ask-user ...; the prompt on stdin.
    pytest.param(
        "copilot",
        "copilot-resume-json.txt",
        EVERYTHING,
        False,
        [
            "--output-format",
            "json",
            "--no-ask-user",
            "--model",
            "the-model",
            "--resume=SID",
            "--allow-tool=Read",
            "--allow-tool=Write",
        ],
        PROMPT,
        id="copilot",
    ),
]


@pytest.mark.parametrize(("agent", "output", "options", "stream", "argv", "stdin"), ARGV)
def test_argv_and_stdin_are_exactly_what_the_cli_expects(
    fake: Fake,
    agent: str,
    output: str,
    options: AgentOptions,
    stream: bool,
    argv: list[str],
    stdin: str,
) -> None:
    """Each option becomes the CLI's own flag, in shep's order; the prompt is on stdin or last."""
    assert _argv(fake, agent, output, options, stream=stream) == argv
    assert fake.recorded()["stdin"] == stdin


@pytest.mark.parametrize(
    ("agent", "output", "tools", "present", "absent"),
    [
        # gemini stays in its default approval mode (read-only when headless).
        pytest.param(
            "gemini-cli",
            "gemini-json.txt",
            ("read_file",),
            "--allowed-tools=read_file",
            "--approval-mode",
            id="gemini-cli",
        ),
        pytest.param("continue", "continue-json.txt", ("Read",), "--readonly", "--auto", id="cn"),
        pytest.param(
            "cursor", "cursor-doc-json.txt", ("Read",), "--mode=ask", "--force", id="cursor"
        ),
    ],
)
def test_read_only_tools_keep_the_cli_read_only(
    fake: Fake, agent: str, output: str, tools: tuple[str, ...], present: str, absent: str
) -> None:
    """Without a write tool the CLI runs read-only: ``present`` is passed, ``absent`` is not."""
    argv = _argv(fake, agent, output, AgentOptions(allowed_tools=tools))
    assert present in argv
    assert absent not in argv


# -- Claude Code ---------------------------------------------------------------------------


def test_claude_structured_output(fake: Fake) -> None:
    """--json-schema: the result's structured_output becomes AgentResult.structured_output."""
    result = fake.executor("claude-code", "claude-structured-output-json.txt").execute(
        PROMPT, AgentOptions(output_schema=SCHEMA)
    )
    assert result.structured_output == {"name": "Ada"}
    assert result.text == '{"name":"Ada"}'


def test_claude_structured_output_missing_is_an_output_error(fake: Fake) -> None:
    """Asked for structured output, an answer that is not JSON raises AgentOutputError."""
    executor = fake.executor("claude-code", "claude-json.txt")
    with pytest.raises(AgentOutputError) as caught:
        executor.execute(PROMPT, AgentOptions(output_schema=SCHEMA))
    assert str(caught.value) == (
        "Claude Code was asked for structured output but answered with: "
        "'Hello from the fake LLM. The answer is 42.'"
    )


def test_claude_stream_without_partial_messages_gives_whole_blocks(fake: Fake) -> None:
    """Without partial messages each assistant text block is one TextDelta."""
    events = list(
        fake.executor("claude-code", stream="claude-stream-json.txt").stream(PROMPT, AgentOptions())
    )
    assert events[0] == SessionStarted(
        session_id="9ffe1b00-ca0c-4ee1-b563-227610b2803f", model="claude-opus-4-8[1m]"
    )
    assert events[1] == TextDelta(text="Hello from the fake LLM. The answer is 42.")
    assert isinstance(events[2], Completed)
    assert len(events) == 3


def test_claude_partial_deltas_are_not_repeated_by_the_full_message(fake: Fake) -> None:
    """With partial messages, the assistant line repeating the deltas adds no text."""
    events = list(
        fake.executor("claude-code", stream="claude-stream-json-partial.txt").stream(
            PROMPT, AgentOptions()
        )
    )
    assert [e.text for e in events if isinstance(e, TextDelta)] == [
        "Hello from the",
        " fake LLM. ",
        "The answer is",
        " 42.",
    ]


def test_claude_permission_denied_tool_still_succeeds(fake: Fake) -> None:
    """A denied tool (permission_denials) is not an error; the answer is returned."""
    result = fake.executor("claude-code", "claude-tool-write-denied-json.txt").execute(
        PROMPT, AgentOptions()
    )
    assert result.text == "Done: I created hello.txt."
    assert result.raw["permission_denials"][0]["tool_name"] == "Write"


def test_claude_529_then_ok_is_a_success(fake: Fake) -> None:
    """Overloaded errors the CLI retried past do not fail the call."""
    result = fake.executor("claude-code", "claude-529-then-ok-json.txt").execute(
        PROMPT, AgentOptions()
    )
    assert result.text == "Recovered after two 529s."


def test_claude_tool_run_counts_both_turns(fake: Fake) -> None:
    """A run with a tool call reports the CLI's num_turns (2) and the final answer."""
    result = fake.executor("claude-code", "claude-tool-write-json.txt").execute(
        PROMPT, AgentOptions(allowed_tools=("Write",))
    )
    assert (result.turns, result.text) == (2, "Done: I created hello.txt.")
    assert fake.argv()[-2:] == ["--allowedTools", "Write"]


def test_claude_with_no_tools_is_offered_none(fake: Fake) -> None:
    """An empty tool list (the supervisor's evaluator) is ``--tools ""``, not claude's defaults:
    a permission the user granted in ~/.claude/settings.json must not apply to it."""
    fake.executor("claude-code", "claude-529-then-ok-json.txt").execute(
        PROMPT, AgentOptions(allowed_tools=(), max_turns=1)
    )
    argv = fake.argv()
    assert argv[argv.index("--tools") + 1] == ""
    assert "--allowedTools" not in argv
    assert argv[argv.index("--max-turns") + 1] == "1"


# -- Codex ---------------------------------------------------------------------------------


def test_codex_argv_with_resume_and_schema_file(fake: Fake) -> None:
    """codex exec --json ... resume SID -: flags before the subcommand, schema in a file."""
    argv = _argv(fake, "codex", "codex-exec-resume-json.txt", EVERYTHING)
    schema_arg = argv[argv.index("--output-schema") + 1]
    assert argv == [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--model",
        "the-model",
        "--sandbox",
        "workspace-write",
        "--output-schema",
        schema_arg,
        "resume",
        "SID",
        "-",
    ]
    assert json.loads(fake.recorded()["files"][schema_arg]) == SCHEMA


@pytest.mark.parametrize(
    ("tools", "sandbox"),
    [(("Read", "Grep"), "read-only"), (("Read", "Edit"), "workspace-write"), ((), "read-only")],
)
def test_codex_sandbox_follows_the_allowed_tools(
    fake: Fake, tools: tuple[str, ...], sandbox: str
) -> None:
    """Read-only tools -> --sandbox read-only; any write tool -> workspace-write."""
    argv = _argv(fake, "codex", "codex-exec-json.txt", AgentOptions(allowed_tools=tools))
    assert argv[argv.index("--sandbox") + 1] == sandbox


def test_codex_without_allowed_tools_keeps_its_configured_sandbox(fake: Fake) -> None:
    """No allowed_tools: no --sandbox flag, the user's codex config decides."""
    assert "--sandbox" not in _argv(fake, "codex", "codex-exec-json.txt", AgentOptions())


def test_codex_structured_output_is_the_json_answer(fake: Fake) -> None:
    """With an output schema the last agent message is parsed as JSON."""
    captured = sample("codex-exec-json.txt").read_text()
    answer = captured.replace(
        "Hello from the fake LLM. The answer is 42.", '{\\"name\\":\\"Ada\\"}'
    )
    executor = fake.executor("codex", FAKE_STDOUT=str(fake.write("out.txt", answer)))
    result = executor.execute(PROMPT, AgentOptions(output_schema=SCHEMA))
    assert result.structured_output == {"name": "Ada"}


def test_codex_apply_patch_becomes_a_tool_call(fake: Fake) -> None:
    """A file_change item is ToolUse(apply_patch) then its ToolResult listing the changes."""
    events = list(
        fake.executor("codex", "codex-exec-apply-patch-json.txt").stream(PROMPT, AgentOptions())
    )
    path = "/home/dev/homes/codex-patch/work/patched.txt"
    assert (
        ToolUse(
            tool_id="item_0", name="apply_patch", input={"changes": [{"path": path, "kind": "add"}]}
        )
        in events
    )
    assert ToolResult(tool_id="item_0", output=f"add {path}", is_error=False) in events


# -- Qwen Code -----------------------------------------------------------------------------


def test_qwen_structured_result(fake: Fake) -> None:
    """Qwen's structured_result becomes AgentResult.structured_output."""
    result = fake.executor("qwen-code", "qwen-structured-output-json.txt").execute(
        PROMPT, AgentOptions(output_schema=SCHEMA)
    )
    assert result.structured_output == {"name": "Ada"}


# -- opencode ------------------------------------------------------------------------------


def test_opencode_sums_steps(fake: Fake) -> None:
    """Tokens and cost are summed over steps; turns counts the steps."""
    result = fake.executor("opencode", "opencode-run-tool-write-json.txt").execute(
        PROMPT, AgentOptions()
    )
    assert result.turns == 2
    assert (result.usage.input_tokens, result.usage.output_tokens) == (30 + 154, 44 + 7)
    assert result.usage.cost_usd == 0.0


# -- Continue ------------------------------------------------------------------------------


def test_continue_argv(fake: Fake) -> None:
    """cn -p --format json --config FILE ... -- PROMPT, config from SHEP_CONTINUE_CONFIG."""
    executor = fake.executor(
        "continue", "continue-resume-json.txt", SHEP_CONTINUE_CONFIG="/cfg/config.yaml"
    )
    executor.execute("- a prompt starting with a dash", EVERYTHING)
    assert fake.argv() == [
        "-p",
        "--format",
        "json",
        "--config",
        "/cfg/config.yaml",
        "--resume",
        "--model",
        "the-model",
        "--auto",
        "--rule",
        "Be brief.",
        "--",
        "- a prompt starting with a dash",
    ]


def test_continue_resume_says_it_cannot_target_a_session(
    fake: Fake, caplog: pytest.LogCaptureFixture
) -> None:
    """cn resumes only its latest session; shep says so in a debug line."""
    with caplog.at_level(logging.DEBUG, logger="shep.agents"):
        _argv(fake, "continue", "continue-resume-json.txt", AgentOptions(resume_session="SID"))
    assert "continue: cn cannot resume a session by id; passing --resume (latest)" in caplog.text


def test_continue_write_tools_run_in_auto_mode(fake: Fake) -> None:
    """With a write tool cn runs --auto (Write and Edit tools) and its answer is returned."""
    executor = fake.executor("continue", "continue-tool-write-json.txt")
    result = executor.execute(PROMPT, AgentOptions(allowed_tools=("Write",)))
    assert result.text == "Done: I created hello.txt."
    assert "--auto" in fake.argv()


# -- Aider ---------------------------------------------------------------------------------


def test_aider_stream_yields_reply_lines_then_completed(fake: Fake) -> None:
    """stream() yields the reply line by line (no banner, no usage line), then Completed."""
    events = list(fake.executor("aider", "aider-message.txt").stream(PROMPT, AgentOptions()))
    assert events[:-1] == [TextDelta(text="Hello from the fake LLM. The answer is 42.\n")]
    assert isinstance(events[-1], Completed)


def test_aider_answer_after_a_retried_error_is_a_success(fake: Fake) -> None:
    """A rate limit aider retried past ("Retrying in 0.2 seconds...") does not fail the call."""
    result = fake.executor("aider", "aider-429-then-ok.txt").execute(PROMPT, AgentOptions())
    assert result.text == "Hello from the fake LLM. The answer is 42."
    assert result.raw["errors"] == [
        "RateLimitError: RateLimitError: OpenAIException - fake error 429 The API provider has "
        "rate limited you. Try again later or check your quotas."
    ]


# -- Cursor (documentation-based) ------------------------------------------------------------


def test_cursor_camel_case_usage_is_read(fake: Fake) -> None:
    """A result usage object in Cursor's camelCase is mapped onto AgentUsage."""
    out = fake.write(
        "cursor.json",
        '{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s",'
        '"usage":{"inputTokens":10,"outputTokens":5,"cacheReadTokens":3}}\n',
    )
    result = fake.executor("cursor", FAKE_STDOUT=str(out)).execute(PROMPT, AgentOptions())
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (10, 5, 3)


# -- Copilot -------------------------------------------------------------------------------


def test_copilot_session_is_announced_from_the_result_line(fake: Fake) -> None:
    """Copilot names its session only at the end: SessionStarted comes right before Completed."""
    events = list(
        fake.executor("copilot", "copilot-tool-write-json.txt").stream(PROMPT, AgentOptions())
    )
    assert events[-2] == SessionStarted(
        session_id="f45e8eeb-c8ec-4e22-a33b-c0c26daa9fe7", model="fake-model"
    )
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.result.turns == 2
