"""What each executor must do with each captured sample: the contract suite's table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from events.errors import (
    AgentAuthError,
    AgentError,
    AgentExitError,
    AgentRateLimitError,
    AgentSessionNotFoundError,
)

UNKNOWN = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class Success:
    """A sample that must parse into this answer, session and usage."""

    sample: str
    text: str
    session_id: str | None
    usage: dict[str, Any] = field(default_factory=dict)
    turns: int | None = None


@dataclass(frozen=True)
class ToolCase:
    """A streamed sample with one tool call, and the answer that follows it."""

    sample: str
    tool_id: str
    name: str
    input_key: str  # a key the tool input must contain
    output_start: str  # how the tool result's output starts
    text: str


@dataclass(frozen=True)
class Failure:
    """A captured failure and the typed error (and the agent's words) it must become."""

    name: str
    error: type[AgentError]
    message: str
    stdout: str | None = None
    stderr: str | None = None
    exit: int = 0
    resume: str | None = None
    stream: bool = False


@dataclass(frozen=True)
class Case:
    agent: str
    execute: Success
    stream: Success
    resume: Success | None
    resume_args: tuple[str, ...]
    tool: ToolCase | None
    failures: tuple[Failure, ...]
    prompt_on_stdin: bool = True
    json_output: bool = True  # stdout is JSON (non-JSON output is an error)

    def __str__(self) -> str:
        return self.agent


HELLO = "Hello from the fake LLM. The answer is 42."
SECOND = "Second turn: I remember you said hello. The magic word is BANANA."
DONE = "Done: I created hello.txt."

CASES = (
    Case(
        agent="claude-code",
        execute=Success(
            "claude-json.txt",
            HELLO,
            "690c590d-5fc1-40b4-a7c8-66d5a9dfb1fd",
            {"input_tokens": 1668, "output_tokens": 11, "cost_usd": 0.008615},
            turns=1,
        ),
        stream=Success(
            "claude-stream-json-partial.txt",
            HELLO,
            "7f840b4c-d684-41c4-97be-73c093427737",
            {"input_tokens": 1668, "output_tokens": 11},
            turns=1,
        ),
        resume=Success("claude-resume-json.txt", SECOND, "690c590d-5fc1-40b4-a7c8-66d5a9dfb1fd"),
        resume_args=("--resume", "SID"),
        tool=ToolCase(
            "claude-tool-write-stream-json.txt",
            "toolu_fake2fac8c54ea724fde86f3b8f3",
            "Write",
            "file_path",
            "File created successfully at:",
            DONE,
        ),
        failures=(
            Failure(
                "401",
                AgentAuthError,
                "Invalid API key · Fix external API key",
                stdout="claude-error-401-json.txt",
                stderr="claude-error-401-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "401-exit-0",
                AgentAuthError,
                "Invalid API key · Fix external API key",
                stdout="claude-error-401-json.txt",
            ),
            Failure(
                "401-stream",
                AgentAuthError,
                "Invalid API key · Fix external API key",
                stdout="claude-error-401-stream-json.txt",
                stderr="claude-error-401-stream-json.stderr.txt",
                exit=1,
                stream=True,
            ),
            Failure(
                "529",
                AgentRateLimitError,
                "API Error: Repeated 529 Overloaded errors",
                stdout="claude-error-529-json.txt",
                stderr="claude-error-529-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "unreachable-api",
                AgentExitError,
                "claude-code exited with code 1: API Error: Unable to connect to API "
                "(ConnectionRefused)",
                stdout="claude-connection-refused-json.txt",
                exit=1,
            ),
            Failure(
                "unknown-session",
                AgentSessionNotFoundError,
                f"No conversation found with session ID: {UNKNOWN}",
                stdout="claude-resume-unknown-session-json.txt",
                stderr="claude-resume-unknown-session-json.stderr.txt",
                exit=1,
                resume=UNKNOWN,
            ),
        ),
    ),
    Case(
        agent="codex",
        execute=Success(
            "codex-exec-json.txt",
            HELLO,
            "01a20367-6676-7d43-a6e0-fa1142f5f98f",
            {"input_tokens": 7124, "output_tokens": 11, "cost_usd": None},
            turns=1,
        ),
        stream=Success("codex-exec-json.txt", HELLO, "01a20367-6676-7d43-a6e0-fa1142f5f98f"),
        resume=Success(
            "codex-exec-resume-json.txt", SECOND, "01a20367-8818-7d22-89dd-e3f86685cd9c"
        ),
        resume_args=("resume", "SID", "-"),
        tool=ToolCase(
            "codex-exec-tool-json.txt",
            "item_1",
            "shell",
            "command",
            "-rw-r--r-- 1 root root 47",
            DONE,
        ),
        failures=(
            Failure(
                "401",
                AgentAuthError,
                "unexpected status 401 Unauthorized: Incorrect API key provided",
                stdout="codex-exec-error-401-json.txt",
                stderr="codex-exec-error-401-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "429",
                AgentRateLimitError,
                "exceeded retry limit, last status: 429 Too Many Requests",
                stdout="codex-exec-error-429-json.txt",
                stderr="codex-exec-error-429-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "500",
                AgentRateLimitError,
                "We\u2019re currently experiencing high demand",
                stdout="codex-exec-error-500-json.txt",
                stderr="codex-exec-error-500-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "529",
                AgentRateLimitError,
                "unexpected status 529 <unknown status code>: Overloaded",
                stdout="codex-exec-error-529-json.txt",
                stderr="codex-exec-error-529-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "unknown-session",
                AgentSessionNotFoundError,
                f"no rollout found for thread id {UNKNOWN}",
                stdout="codex-exec-resume-unknown-session-json.txt",
                stderr="codex-exec-resume-unknown-session-json.stderr.txt",
                exit=1,
                resume=UNKNOWN,
            ),
        ),
    ),
    Case(
        agent="gemini-cli",
        execute=Success(
            "gemini-json.txt",
            HELLO,
            "1b784dca-8c66-4688-b3ae-6445759ea7bb",
            {"input_tokens": 145, "output_tokens": 11, "cost_usd": None},
        ),
        stream=Success(
            "gemini-stream-json.txt",
            HELLO,
            "d51597fd-a6b4-467f-927a-03af21680c76",
            {"input_tokens": 147, "output_tokens": 11},
        ),
        resume=Success("gemini-resume-json.txt", SECOND, "1b784dca-8c66-4688-b3ae-6445759ea7bb"),
        resume_args=("--resume", "SID"),
        tool=ToolCase(
            "gemini-tool-write-stream-json.txt",
            "write_file__write_file_1795353509456_0",
            "write_file",
            "file_path",
            "success",
            DONE,
        ),
        failures=(
            Failure(
                "401",
                AgentAuthError,
                "API key not valid. Please pass a valid API key.",
                stdout="gemini-error-401-json.txt",
                stderr="gemini-error-401-json.stderr.txt",
                exit=145,
            ),
            Failure(
                "401-stream",
                AgentAuthError,
                "API key not valid. Please pass a valid API key.",
                stdout="gemini-error-401-stream-json.txt",
                stderr="gemini-error-401-stream-json.stderr.txt",
                exit=145,
                stream=True,
            ),
            Failure(
                "429",
                AgentRateLimitError,
                "Resource has been exhausted (e.g. check quota).",
                stdout="gemini-error-429-json.txt",
                stderr="gemini-error-429-json.stderr.txt",
                exit=173,
            ),
            Failure(
                "500",
                AgentExitError,
                "gemini-cli exited with code 244: fake error 500",
                stdout="gemini-error-500-json.txt",
                stderr="gemini-error-500-json.stderr.txt",
                exit=244,
            ),
            Failure(
                "529",
                AgentRateLimitError,
                "The model is overloaded. Please try again later.",
                stdout="gemini-error-529-json.txt",
                stderr="gemini-error-529-json.stderr.txt",
                exit=17,
            ),
            Failure(
                "unknown-session",
                AgentSessionNotFoundError,
                f'Invalid session identifier "{UNKNOWN}"',
                stderr="gemini-resume-unknown-session-json.stderr.txt",
                exit=42,
                resume=UNKNOWN,
            ),
        ),
    ),
    Case(
        agent="opencode",
        execute=Success(
            "opencode-run-json.txt",
            HELLO,
            "ses_dfc962cc8ffepmZeezgXHhjotS",
            {"input_tokens": 28, "output_tokens": 11, "cost_usd": 0.0},
            turns=1,
        ),
        stream=Success("opencode-run-json.txt", HELLO, "ses_dfc962cc8ffepmZeezgXHhjotS"),
        resume=Success("opencode-run-resume-json.txt", SECOND, "ses_dfc962cc8ffepmZeezgXHhjotS"),
        resume_args=("--session", "SID"),
        tool=ToolCase(
            "opencode-run-tool-write-json.txt",
            "toolu_fake216e95a26e7a4eb4b79b26f6",
            "write",
            "filePath",
            "Wrote file successfully.",
            DONE,
        ),
        failures=(
            Failure(
                "401",
                AgentAuthError,
                "invalid x-api-key",
                stdout="opencode-run-error-401-json.txt",
                stderr="opencode-run-error-401-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "500",
                AgentExitError,
                "opencode exited with code 1: fake error 500",
                stdout="opencode-run-error-500-json.txt",
                stderr="opencode-run-error-500-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "529",
                AgentRateLimitError,
                "(HTTP 529): Overloaded",
                stdout="opencode-run-error-529-json.txt",
                stderr="opencode-run-error-529-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "unknown-session",
                AgentSessionNotFoundError,
                "Error: Session not found",
                stderr="opencode-run-resume-unknown-session-json.stderr.txt",
                exit=1,
                resume="ses_doesnotexist000000000000",
            ),
        ),
    ),
    Case(
        agent="qwen-code",
        execute=Success(
            "qwen-json.txt",
            HELLO,
            "32c705a6-7d6e-4696-acc5-103b00bb520d",
            {"input_tokens": 6567, "output_tokens": 11, "cost_usd": None},
            turns=1,
        ),
        stream=Success("qwen-stream-json.txt", HELLO, "ce83deb3-a90c-464f-bd87-354ade129932"),
        resume=Success("qwen-resume-json.txt", SECOND, "32c705a6-7d6e-4696-acc5-103b00bb520d"),
        resume_args=("--resume", "SID"),
        tool=ToolCase(
            "qwen-tool-write-stream-json.txt",
            "call_fake86791a8b42f64670a6ce8e40",
            "write_file",
            "file_path",
            "Successfully created and wrote to new file",
            DONE,
        ),
        failures=(
            Failure(
                "401-exit-0",
                AgentAuthError,
                "401 Incorrect API key provided",
                stdout="qwen-error-401-json.txt",
                stderr="qwen-error-401-json.stderr.txt",
            ),
            Failure(
                "500-exit-0",
                AgentError,
                "Qwen Code reported an error: 500 fake error 500",
                stdout="qwen-error-500-json.txt",
                stderr="qwen-error-500-json.stderr.txt",
            ),
            Failure(
                "529-exit-0",
                AgentRateLimitError,
                "529 Overloaded",
                stdout="qwen-error-529-json.txt",
                stderr="qwen-error-529-json.stderr.txt",
            ),
            Failure(
                "401-text-mode",
                AgentAuthError,
                "[API Error: 401 Incorrect API key provided",
                stdout="qwen-error-401-text.txt",
                stderr="qwen-error-401-text.stderr.txt",
                exit=1,
            ),
            Failure(
                "unknown-session",
                AgentSessionNotFoundError,
                f'No saved session found with title "{UNKNOWN}"',
                stderr="qwen-resume-unknown-session-json.stderr.txt",
                exit=1,
                resume=UNKNOWN,
            ),
        ),
    ),
    Case(
        agent="aider",
        execute=Success(
            "aider-message.txt",
            HELLO,
            None,
            {"input_tokens": 593, "output_tokens": 13, "cost_usd": None},
        ),
        stream=Success("aider-message.txt", HELLO, None),
        resume=None,
        resume_args=(),
        tool=ToolCase(
            "aider-message-edit.txt",
            "aider-edit-1",
            "edit",
            "path",
            "Applied edit to hello.txt",
            "Here is the new file:\n\nhello.txt\n```\n"
            "written by the fake LLM via aider (whole edit format)\n```",
        ),
        failures=(
            Failure(
                "401-exit-0",
                AgentAuthError,
                "OpenAIException - Incorrect API key provided: sk-fake. You can find your API key "
                "at https://platform.openai.com/account/api-keys. The API provider is not able to "
                "authenticate you.",
                stdout="aider-error-401.txt",
            ),
            Failure(
                "429-exit-0",
                AgentRateLimitError,
                "RateLimitError: OpenAIException - fake error 429 The API provider has rate "
                "limited you.",
                stdout="aider-error-429.txt",
            ),
            Failure(
                "500-exit-0",
                AgentRateLimitError,
                "fake error 500 The API provider's servers are down or overloaded.",
                stdout="aider-error-500.txt",
            ),
            Failure(
                "529-exit-0",
                AgentError,
                "Aider reported an error: APIError: APIError: OpenAIException - fake error 529",
                stdout="aider-error-529.txt",
            ),
        ),
        prompt_on_stdin=False,
        json_output=False,
    ),
    Case(
        agent="continue",
        execute=Success("continue-json.txt", HELLO, None, {"input_tokens": 0, "cost_usd": None}),
        stream=Success("continue-json.txt", HELLO, None),
        resume=Success("continue-resume-json.txt", SECOND, None),
        resume_args=("--resume",),
        tool=None,
        failures=(
            Failure(
                "401",
                AgentAuthError,
                "401 Incorrect API key provided",
                stdout="continue-error-401-json.txt",
                stderr="continue-error-401-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "529",
                AgentRateLimitError,
                "529 Overloaded",
                stdout="continue-error-529-json.txt",
                stderr="continue-error-529-json.stderr.txt",
                exit=1,
            ),
        ),
        prompt_on_stdin=False,
    ),
    Case(
        agent="cursor",
        execute=Success("cursor-doc-json.txt", HELLO, "c6b62c6f-7ead-4fd6-9922-e952131177ff"),
        stream=Success(
            "cursor-doc-stream-json.txt",
            "I'll create the file.Done: I created hello.txt.",
            "c6b62c6f-7ead-4fd6-9922-e952131177ff",
        ),
        resume=Success("cursor-doc-json.txt", HELLO, "c6b62c6f-7ead-4fd6-9922-e952131177ff"),
        resume_args=("--resume=SID",),
        tool=ToolCase(
            "cursor-doc-stream-json.txt",
            "toolu_vrtx_01NnjaR886UcE8whekg2MGJd",
            "write",
            "path",
            '{"success":',
            "I'll create the file.Done: I created hello.txt.",
        ),
        failures=(),
        prompt_on_stdin=False,
    ),
    Case(
        agent="copilot",
        execute=Success(
            "copilot-json.txt",
            HELLO,
            "07a25474-82f0-4821-af65-9a7fd1e2a953",
            {"input_tokens": 0, "cost_usd": None},
            turns=1,
        ),
        stream=Success("copilot-json.txt", HELLO, "07a25474-82f0-4821-af65-9a7fd1e2a953"),
        resume=Success("copilot-resume-json.txt", SECOND, "07a25474-82f0-4821-af65-9a7fd1e2a953"),
        resume_args=("--resume=SID",),
        tool=ToolCase(
            "copilot-tool-write-json.txt",
            "call_fakewrite1",
            "create",
            "file_text",
            "Created file /tmp/cphome/work/hello.txt with 43 characters",
            DONE,
        ),
        failures=(
            Failure(
                "401",
                AgentAuthError,
                "Authentication failed with provider at http://127.0.0.1:18766/v1 (HTTP 401)",
                stdout="copilot-error-401-json.txt",
                exit=1,
            ),
            Failure(
                "429",
                AgentRateLimitError,
                "Last error: 429 fake error 429",
                stdout="copilot-error-429-json.txt",
                exit=1,
            ),
            Failure(
                "500",
                AgentExitError,
                "copilot exited with code 1: Failed to get response from the AI model; retried "
                "5 times",
                stdout="copilot-error-500-json.txt",
                exit=1,
            ),
            Failure(
                "no-credentials",
                AgentAuthError,
                "Error: No authentication information found.",
                stdout="copilot-no-auth-json.txt",
                stderr="copilot-no-auth-json.stderr.txt",
                exit=1,
            ),
            Failure(
                "unknown-session",
                AgentSessionNotFoundError,
                f"No session, task, or name matched '{UNKNOWN}'",
                stderr="copilot-resume-unknown-session-json.stderr.txt",
                exit=1,
                resume=UNKNOWN,
            ),
        ),
    ),
)

FAILURES = tuple((case, failure) for case in CASES for failure in case.failures)
