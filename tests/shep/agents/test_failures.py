"""Classifying what the CLIs say went wrong (shep/agents/failures.py)."""

from __future__ import annotations

import pytest

from events.errors import AgentAuthError, AgentError, AgentExitError, AgentRateLimitError
from shep.agents import AGENT_SPECS, AgentUsage
from shep.agents.executor import add_usage, has_write_tools, parse_structured
from shep.agents.failures import agent_failure, api_error, clean, error_line, status_in

SPEC = AGENT_SPECS["codex"]


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("unexpected status 401 Unauthorized: bad key", 401),
        ("exceeded retry limit, last status: 429 Too Many Requests", 429),
        ("[API Error: 529 Overloaded]", 529),
        ('{"error":{"code":500,"message":"boom"}}', 500),
        ("Authentication failed with provider (HTTP 401).", 401),
        ("API Error: Repeated 529 Overloaded errors.", 529),
        ("401 Incorrect API key provided", 401),
        ("listening on 127.0.0.1:44445", None),
        ("Hello from the fake LLM. The answer is 42.", None),
    ],
)
def test_status_in_finds_the_http_status(text: str, status: int | None) -> None:
    """The HTTP status is found in each CLI's phrasing, and not invented from other numbers."""
    assert status_in(text) == status


@pytest.mark.parametrize(
    ("message", "status", "error"),
    [
        ("bad key", 401, AgentAuthError),
        ("forbidden", 403, AgentAuthError),
        ("slow down", 429, AgentRateLimitError),
        ("busy", 503, AgentRateLimitError),
        ("Overloaded", 529, AgentRateLimitError),
        ("We\u2019re currently experiencing high demand", None, AgentRateLimitError),
        ("Resource has been exhausted (e.g. check quota).", None, AgentRateLimitError),
        ("API key not valid. Please pass a valid API key.", None, AgentAuthError),
        ("fake error 500", 500, None),
        ("Connection refused", None, None),
    ],
)
def test_api_error_types(message: str, status: int | None, error: type[AgentError] | None) -> None:
    """401/403 and auth wording are auth errors; 429/503/529 and overload wording rate limits."""
    found = api_error(SPEC, message, status=status)
    if error is None:
        assert found is None
    else:
        assert type(found) is error


def test_auth_error_message_names_the_token_variables() -> None:
    """The auth message quotes the agent and says which variables to check."""
    error = api_error(SPEC, "unexpected status 401 Unauthorized: Incorrect API key provided")
    assert str(error) == (
        "Codex was refused by its API (HTTP 401): unexpected status 401 Unauthorized: "
        "Incorrect API key provided. Check CODEX_API_KEY or OPENAI_API_KEY, or log in to "
        "`codex` again."
    )


def test_agent_failure_without_a_known_cause() -> None:
    """Unknown failures: AgentExitError for non-zero exits, plain AgentError for exit 0."""
    failed = agent_failure(SPEC, "something odd", exit_code=2)
    assert type(failed) is AgentExitError
    assert str(failed) == "codex exited with code 2: something odd"
    quiet = agent_failure(SPEC, "something odd", exit_code=0)
    assert type(quiet) is AgentError
    assert str(quiet) == "Codex reported an error: something odd"


def test_clean_strips_colours_and_long_text() -> None:
    """Messages lose ANSI colours and newlines and are cut to a few hundred characters."""
    assert clean("\x1b[91m\x1b[1mError: \x1b[0mSession\n not found") == "Error: Session not found"
    assert len(clean("x" * 5000)) == 600


def test_error_line_skips_stack_traces() -> None:
    """The error line is the last line reading like an error, not the trace after it."""
    stderr = "WARNING: x\nError: thread/resume failed\n\nStack backtrace:\n   0: <unknown>\n"
    assert error_line(stderr) == "Error: thread/resume failed"
    assert error_line("just a line\n") == "just a line"
    assert error_line("") == ""


@pytest.mark.parametrize(
    ("tools", "writes"),
    [
        (("Read", "Grep", "Glob"), False),
        (("Read", "Write"), True),
        (("Bash(git:*)",), True),
        (("read_file", "write_file"), True),
        (("view",), False),
        ((), False),
    ],
)
def test_has_write_tools(tools: tuple[str, ...], writes: bool) -> None:
    """Write-capable tools are recognized in any agent's spelling."""
    assert has_write_tools(tools) is writes


def test_parse_structured_accepts_fenced_json() -> None:
    """Structured answers may come inside a Markdown code fence."""
    assert parse_structured('```json\n{"a": 1}\n```') == {"a": 1}
    assert parse_structured('{"a": 1}') == {"a": 1}
    assert parse_structured("not json") is None


def test_add_usage_sums_counts_and_keeps_an_unknown_cost_unknown() -> None:
    """Steps add up; the cost is None until a step reports one, then a sum (0.0 counts)."""
    total = add_usage(AgentUsage(), input_tokens=3, output_tokens=2, cache_read_tokens=1)
    total = add_usage(total, input_tokens=4, cache_write_tokens=5)
    assert (total.input_tokens, total.output_tokens) == (7, 2)
    assert (total.cache_read_tokens, total.cache_write_tokens) == (1, 5)
    assert total.cost_usd is None
    total = add_usage(total, cost_usd=0.0)
    assert total.cost_usd == 0.0
    assert add_usage(total, cost_usd=0.25).cost_usd == 0.25


def test_gemini_error_wrapper_keeps_the_whole_message() -> None:
    """`[API Error: ...]` is unwrapped without cutting the message when `]` is missing."""
    from shep.agents.gemini import ErrorDetail, _error_message

    assert _error_message(ErrorDetail(message="[API Error: quota exceeded", code=429)) == (
        "quota exceeded",
        429,
    )
    assert _error_message(ErrorDetail(message="[API Error: quota exceeded]", code=429)) == (
        "quota exceeded",
        429,
    )
