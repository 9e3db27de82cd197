"""The shared shape of every CLI executor: build argv, run the process, parse its output.

A concrete executor supplies two things: ``command()`` (argv and stdin for one
call) and ``output_parser`` (a ``CliParser`` subclass, an ``OutputParser`` that
turns stdout lines into normalized events and, at the end, into an
``AgentResult`` or a typed error), plus ``stream_parser`` when the CLI streams
in another format. Everything else (environment, token placement, the
subprocess discipline, dropping unsupported options, redacting the token from
errors, the error for a run without a result) lives here once.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import msgspec

from events.errors import AgentError, AgentExitError
from shep.agents.failures import api_error, error_line, exit_error, output_error, session_not_found
from shep.agents.model import (
    AgentEvent,
    AgentOptions,
    AgentResult,
    AgentUsage,
    Completed,
    TextDelta,
)
from shep.agents.process import AgentProcess, ProcessLimits, ProcessOutcome, describe_cap
from shep.agents.spec import AgentSpec

__all__ = [
    "ARGV_PROMPT_LIMIT",
    "CliExecutor",
    "CliParser",
    "Command",
    "JsonDocument",
    "JsonDocumentParser",
    "OutputParser",
    "OutputSample",
    "Scratch",
    "add_usage",
    "as_text",
    "decode_json",
    "decode_line",
    "has_write_tools",
    "parse_structured",
]

log = logging.getLogger("shep.agents")

# Linux refuses a single argv string over 128 KiB (MAX_ARG_STRLEN); stay below it.
ARGV_PROMPT_LIMIT = 120 * 1024

# Tool names (any agent's spelling, lower-cased, without a "(pattern)" suffix) that
# change files or run commands. Used to pick a write-capable mode when a node's
# allowed tools include one of them.
_WRITE_TOOLS = frozenset(
    {
        "write",
        "edit",
        "multiedit",
        "notebookedit",
        "bash",
        "shell",
        "write_file",
        "replace",
        "edit_file",
        "run_shell_command",
        "apply_patch",
        "create",
        "str_replace",
    }
)
_OPTION_FIELDS = tuple(f for f in AgentOptions.__struct_fields__ if f not in ("cwd", "timeout"))


def has_write_tools(tools: Iterable[str]) -> bool:
    """Whether any of ``tools`` can change files or run commands."""
    return any(tool.split("(", 1)[0].strip().lower() in _WRITE_TOOLS for tool in tools)


def decode_json(data: bytes | bytearray) -> Any:
    """``data`` decoded as JSON, or ``msgspec.DecodeError``."""
    return msgspec.json.decode(data)


def parse_structured(text: str) -> Any | None:
    """The JSON value an agent answered with when asked for structured output.

    Tolerates a Markdown code fence around the JSON; ``None`` if it is not JSON.
    """
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        return msgspec.json.decode(body.strip().encode())
    except msgspec.DecodeError:
        return None


def as_text(value: Any) -> str:
    """``value`` as text for a result or a tool's output: a string as it is, else its JSON."""
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def add_usage(
    total: AgentUsage,
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    cost_usd: float | None = None,
) -> AgentUsage:
    """``total`` plus one step's (or turn's) counts, for CLIs that report usage per step.

    The cost stays ``None`` (unknown) until a step reports one.
    """
    cost = total.cost_usd
    if cost_usd is not None:
        cost = (cost or 0.0) + cost_usd
    return AgentUsage(
        input_tokens=total.input_tokens + input_tokens,
        output_tokens=total.output_tokens + output_tokens,
        cache_read_tokens=total.cache_read_tokens + cache_read_tokens,
        cache_write_tokens=total.cache_write_tokens + cache_write_tokens,
        cost_usd=cost,
    )


class OutputSample:
    """The first 64 KiB of stdout a parser could not use, kept to explain a failure."""

    limit = 64 * 1024

    def __init__(self) -> None:
        self._data = bytearray()

    def add(self, line: bytes) -> None:
        if len(self._data) < self.limit:
            self._data += line + b"\n"

    def __bytes__(self) -> bytes:
        return bytes(self._data)


def decode_line(line: bytes, line_type: Any, sample: OutputSample) -> tuple[Any, Any] | None:
    """A JSON line converted to ``line_type`` (a tagged union of Structs), with the raw object.

    ``None`` for a blank line, for an object of a type shep does not use, and for a
    line that is not JSON (which goes into ``sample``).
    """
    if not line.strip():
        return None
    try:
        obj = decode_json(line)
    except msgspec.DecodeError:
        sample.add(line)
        return None
    try:
        return msgspec.convert(obj, line_type), obj
    except msgspec.ValidationError:
        return None


class JsonDocument:
    """A JSON document printed over one or more stdout lines.

    ``add`` reports when the document is complete: a one-line document, or a
    pretty-printed one whose closing bracket starts a line. That lets shep stop
    waiting for an agent that printed its answer and then lingers.
    """

    def __init__(self) -> None:
        self.data = bytearray()  # bounded by the output cap (JsonDocumentParser.feed)

    def add(self, line: bytes) -> bool:
        """Append a line; ``True`` once the collected text is a complete JSON value."""
        self.data += line + b"\n"
        stripped = line.rstrip()
        closes = stripped[-1:] in (b"}", b"]")
        if closes and (line[:1] in (b"}", b"]") or line.lstrip()[:1] in (b"{", b"[")):
            try:
                decode_json(self.data)
            except msgspec.DecodeError:
                return False
            return True
        return False


@dataclass(frozen=True)
class Command:
    """One invocation: argv after the binary, and what to write on stdin (if anything)."""

    args: list[str]
    stdin: str | None


class Scratch:
    """A temporary directory for files an invocation needs, created on first use."""

    def __init__(self) -> None:
        self._dir: Path | None = None

    def write(self, name: str, data: str) -> str:
        """Write ``data`` to a private file called ``name``; returns its path."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="shep-agent-"))
        path = self._dir / name
        path.write_text(data, encoding="utf-8")
        return str(path)

    def remove(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class OutputParser(Protocol):
    """Turns one call's stdout into events, then into a result or a typed error."""

    @property
    def done(self) -> bool:
        """Whether the agent's final result has been seen (it may now be stopped)."""
        ...

    def feed(self, line: bytes) -> Iterable[AgentEvent]:
        """Events for one stdout line (without its newline)."""
        ...

    def finish(self, outcome: ProcessOutcome) -> AgentResult:
        """The result once the process ended; raises a typed ``AgentError`` instead."""
        ...


class CliParser(OutputParser):
    """Base of the executors' parsers: the call it parses, and the stdout it could not use."""

    def __init__(self, executor: CliExecutor, options: AgentOptions) -> None:
        self.executor = executor
        self.spec: AgentSpec = executor.spec
        self.options = options
        self.sample = OutputSample()

    def unused_output(self) -> bytes:
        """What stdout held that the parser did not use, to quote when no result came."""
        return bytes(self.sample)

    def no_result(self, outcome: ProcessOutcome) -> AgentError:
        """The error for a run that ended without a usable final result."""
        return self.executor.no_result_error(outcome, self.unused_output(), self.options)

    def structured(self, answer: str) -> Any | None:
        """The JSON value of ``answer`` when the call asked for structured output, else ``None``.

        Raises ``AgentOutputError`` quoting the answer if it is not JSON.
        """
        if self.options.output_schema is None:
            return None
        value = parse_structured(answer)
        if value is None:
            raise output_error(
                self.spec, "was asked for structured output but answered with", answer
            )
        return value


class JsonDocumentParser(CliParser):
    """Base of the parsers for formats that print one JSON document, parsed at the end."""

    def __init__(self, executor: CliExecutor, options: AgentOptions) -> None:
        super().__init__(executor, options)
        self.document = JsonDocument()
        self._complete = False

    @property
    def done(self) -> bool:
        return self._complete

    def feed(self, line: bytes) -> Iterable[AgentEvent]:
        self._complete = self.document.add(line)
        cap = self.executor.limits.output_cap
        if len(self.document.data) > cap:
            # The whole document is held until it ends: the one output the cap must bound.
            raise output_error(
                self.spec,
                f"printed a JSON document of more than {describe_cap(cap)} (it is held in "
                "memory whole); shep stopped it. If that is expected, raise the cap: "
                "shep settings set agent_output_mib N",
            )
        return ()

    def unused_output(self) -> bytes:
        return bytes(self.document.data)

    def decoded(self, outcome: ProcessOutcome) -> Any | None:
        """The document's JSON value; ``None`` if nothing was printed.

        Invalid JSON is ``AgentOutputError`` after exit code 0, and ``None`` after a
        failure: then the exit and stderr explain more than the broken output does.
        """
        data = bytes(self.document.data)
        if not data.strip():
            return None
        try:
            return decode_json(data)
        except msgspec.DecodeError:
            if not outcome.exit_code:
                raise output_error(self.spec, "printed truncated or invalid JSON", data) from None
            return None


class CliExecutor:
    """Base of the executors that drive an agent CLI as a subprocess."""

    features: ClassVar[frozenset[str]] = frozenset()
    # What the CLI says when asked to resume a session it does not know.
    session_missing: ClassVar[re.Pattern[str] | None] = None
    # AgentOptions fields this executor maps to flags; others are dropped with a
    # debug line. cwd and timeout are handled here for every executor.
    handled: ClassVar[frozenset[str]] = frozenset()
    # Reads stdout: ``output_parser`` for execute(), and for stream() too unless the
    # CLI prints another format when streaming, which ``stream_parser`` reads.
    output_parser: ClassVar[type[CliParser]]
    stream_parser: ClassVar[type[CliParser] | None] = None

    def __init__(
        self,
        spec: AgentSpec,
        *,
        token: str | None = None,
        binary: str | None = None,
        env: Mapping[str, str] | None = None,
        limits: ProcessLimits | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.type
        self._binary = binary or spec.binary
        self._extra_env = dict(env or {})
        self._token = token
        self._limits = limits or ProcessLimits()

    @property
    def limits(self) -> ProcessLimits:
        """The bounds of each call's subprocess (time, memory held)."""
        return self._limits

    def __repr__(self) -> str:
        # Never show the token.
        return f"{type(self).__name__}(binary={self._binary!r})"

    # -- the AgentExecutor protocol ------------------------------------------------------

    def supports(self, feature: str) -> bool:
        return feature in self.features

    def execute(self, prompt: str, options: AgentOptions) -> AgentResult:
        for event in self._run(prompt, options, streaming=False):
            if isinstance(event, Completed):
                return event.result
        raise AssertionError("an agent run ended without a result or an error")

    def stream(self, prompt: str, options: AgentOptions) -> Iterator[AgentEvent]:
        return self._run(prompt, options, streaming=True)

    # -- what each executor provides ----------------------------------------------------

    def command(
        self, prompt: str, options: AgentOptions, *, streaming: bool, scratch: Scratch
    ) -> Command:
        raise NotImplementedError

    def parser(self, options: AgentOptions, *, streaming: bool) -> OutputParser:
        parser = self.stream_parser if streaming and self.stream_parser else self.output_parser
        return parser(self, options)

    # -- shared machinery -----------------------------------------------------------------

    def drop(self, option: str, why: str = "not supported") -> None:
        """Log (debug) that ``option`` is ignored for this agent."""
        log.debug("%s: dropping option %s (%s)", self.name, option, why)

    def child_env(self) -> dict[str, str]:
        """os.environ, then the executor's extra env, then the token under its variables."""
        env = {**os.environ, **self._extra_env}
        if self._token is not None:
            for var in self.spec.token_env:
                env[var] = self._token
        return env

    def _drop_unsupported(self, options: AgentOptions) -> None:
        for field in _OPTION_FIELDS:
            if field not in self.handled and getattr(options, field) is not None:
                self.drop(field)

    def _run(self, prompt: str, options: AgentOptions, *, streaming: bool) -> Iterator[AgentEvent]:
        self._drop_unsupported(options)
        scratch = Scratch()
        texted = False
        try:
            command = self.command(prompt, options, streaming=streaming, scratch=scratch)
            parser = self.parser(options, streaming=streaming)
            log.debug("%s: running %s %s", self.name, self._binary, _describe(command.args))
            with AgentProcess(
                [self._binary, *command.args],
                stdin=None if command.stdin is None else command.stdin.encode("utf-8"),
                env=self.child_env(),
                cwd=options.cwd,
                limits=self._limits,
                timeout=options.timeout,
                agent=self.name,
                label=self.spec.label,
                install_hint=self.spec.install_hint,
            ) as process:
                for line in process.lines():
                    for event in parser.feed(line):
                        texted = texted or isinstance(event, TextDelta)
                        yield event
                    if parser.done:
                        process.mark_result()
                outcome = process.finish()
            result = parser.finish(outcome)
        except AgentError as error:
            self._redact(error)
            raise
        finally:
            scratch.remove()
        if not texted and result.text:
            # Formats without incremental output still give streams the answer as text.
            yield TextDelta(text=result.text)
        yield Completed(result=result)

    def _redact(self, error: AgentError) -> None:
        """Mask the token out of ``error``, should an API have echoed it back."""
        token = self._token
        if not token or len(token) < 4:
            return
        error.args = tuple(
            arg.replace(token, "***") if isinstance(arg, str) else arg for arg in error.args
        )
        if isinstance(error, AgentExitError):
            error.stderr_tail = error.stderr_tail.replace(token, "***")

    def no_result_error(
        self, outcome: ProcessOutcome, output: bytes, options: AgentOptions
    ) -> AgentError:
        """The error for a run that ended without a usable final result.

        In order: an unknown session being resumed, an auth or rate-limit message on
        stderr (or in stray stdout lines), a plain non-zero exit, then output problems.
        """
        spec = self.spec
        said = "\n".join(
            part for part in (outcome.stderr, output.decode("utf-8", "replace")) if part
        )
        if options.resume_session is not None and self.session_missing is not None:
            for line in said.splitlines():
                if self.session_missing.search(line):
                    return session_not_found(spec, options.resume_session, line)
        if outcome.exit_code:
            typed = api_error(spec, error_line(said))
            if typed is not None:
                return typed
            return exit_error(
                spec, outcome.exit_code, outcome.stderr or output.decode("utf-8", "replace")
            )
        if outcome.exit_code is None:
            return output_error(
                spec, "was stopped after it printed a result shep could not use", output
            )
        if not output.strip():
            return output_error(spec, "exited without printing anything")
        return output_error(spec, "exited without a final result; its output began", output)

    def check_argv_prompt(self, prompt: str) -> None:
        """Refuse a prompt too long to pass as one argv string (agents without stdin)."""
        if len(prompt.encode("utf-8")) > ARGV_PROMPT_LIMIT:
            raise AgentError(
                f"{self.spec.label} takes its prompt on the command line, and this prompt is "
                f"{len(prompt.encode('utf-8'))} bytes (the limit is {ARGV_PROMPT_LIMIT}). "
                "Shorten it, or use an agent that reads the prompt from stdin.",
                agent=self.name,
            )


def _describe(args: list[str]) -> str:
    """argv for a debug line: long values (prompts, schemas) shortened."""
    return " ".join(a if len(a) <= 80 else a[:77] + "..." for a in args)
