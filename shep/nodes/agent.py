"""The agent step node kind: ask the configured agent, stream its output into the log.

- ``NodeStarted`` and the agent's session id are committed as soon as they
  happen, so ``shep status`` and resume see them at once;
- the output is recorded in batches (``AgentOutputBuffer``), text joined into lines;
- ``NodeCompleted`` (and ``ArtifactWritten``) join the step's checkpoint;
- a rejection reason for the step (``feedback``) is given to the agent.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec

from commands.record_agent_output import OutputItem
from commands.record_node import record_agent_session, start_agent
from events.errors import (
    AgentError,
    AgentSessionNotFoundError,
    ShepError,
    StepFailedError,
    UnsafePathError,
)
from events.runs import AgentSessionRecorded, ArtifactWritten, NodeCompleted, NodeFailed, Usage
from shep.agents import (
    AgentEvent,
    AgentExecutor,
    AgentOptions,
    AgentResult,
    Completed,
    SessionStarted,
    TextDelta,
    ToolResult,
    ToolUse,
    embed_context,
)
from shep.agents.process import LAUNCHER, kill_group
from shep.git.worktree import inside_worktree, read_inside
from shep.home.settings import Settings
from shep.nodes.context import RunContext, iteration_of
from shep.workflows.base import AgentStep, NodeFn, repository_tree, tools_for

TOOL_TEXT_LIMIT = 2000


class AgentNodes:
    """Runs agent steps for one execution of a run."""

    def __init__(
        self, ctx: RunContext, executor: AgentExecutor, settings: Settings, timeout: float
    ) -> None:
        self.ctx = ctx
        self.executor = executor
        self.settings = settings
        self.timeout = timeout
        #: Sessions of agent steps that started but never completed (resume them).
        self._inflight: dict[str, str] = {}

    def remember(self, event: object) -> None:
        """Learn from the run's history which sessions were in flight."""
        if isinstance(event, AgentSessionRecorded):
            self._inflight[event.node] = event.agent_session_id
        elif isinstance(event, NodeCompleted | NodeFailed):
            self._inflight.pop(event.node, None)

    def node(self, step: AgentStep) -> NodeFn:
        def run(state: Mapping[str, Any]) -> dict[str, Any]:
            return self.run(step, state)

        run.__name__ = step.name.replace("-", "_")
        return run

    def run(self, step: AgentStep, state: Mapping[str, Any]) -> dict[str, Any]:
        ctx = self.ctx
        iteration = iteration_of(state, step.name)
        ctx.start_node(step.name, iteration, kind="agent")
        started_wall = time.time()
        started = time.monotonic()
        buffer = ctx.output_buffer()
        try:
            result = self._call_agent(step, state)
        except AgentError as e:
            buffer.flush()
            ctx.fail_node(step.name, started=started, error=e, retryable=e.retryable)
            raise
        buffer.flush()
        before: list[tuple[type[Any], dict[str, Any]]] = []
        if step.artifact:
            before.append((ArtifactWritten, self._write_artifact(step, result.text, started_wall)))
        snapshot = ctx.snapshot(step.name) if step.writes or step.write_only else None
        usage = Usage(
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            cache_read_tokens=result.usage.cache_read_tokens,
            cache_write_tokens=result.usage.cache_write_tokens,
            cost_usd=result.usage.cost_usd,
        )
        ctx.complete_node(
            step.name,
            started=started,
            before=before,
            session_id=result.session_id,
            usage=usage,
            turns=result.turns,
            snapshot=snapshot,
        )
        session = result.session_id if self.executor.supports("session-resume") else None
        return {
            "results": {step.name: result.text},
            "session_id": session,
            "iterations": {step.name: iteration},
        }

    def _call_agent(self, step: AgentStep, state: Mapping[str, Any]) -> AgentResult:
        plan = self.ctx.plan
        repo = plan.repo
        fields = {"repo": str(repo), "repo_name": repo.name, **plan.inputs}
        template = step.prompt(state) if step.prompt else step.instruction
        if "{tree}" in template:
            fields["tree"] = repository_tree(repo)
        instruction = template.format(**fields) if step.prompt is None else template
        reason = (state.get("feedback") or {}).get(step.name)
        if reason:
            instruction += (
                "\n\nA reviewer rejected the previous result of this step. Their reason:\n"
                f"{reason}\nRevise the result accordingly."
            )
        resumable = self.executor.supports("session-resume")
        session = self._inflight.get(step.name) or state.get("session_id")
        earlier = [(n, t) for n, t in (state.get("results") or {}).items() if n != step.name]
        prompt = instruction
        if not resumable or not session:
            prompt = embed_context(instruction, earlier)
            session = None
        options = AgentOptions(
            cwd=str(repo),
            allowed_tools=tools_for(plan.agent_type, write=step.writes, only=step.write_only),
            resume_session=session,
            model=plan.model or self.settings.model,
            timeout=self.timeout,
            max_turns=step.max_turns,
        )
        try:
            return self._stream(step, prompt, options)
        except AgentSessionNotFoundError:
            # The agent forgot the session (new machine, cleared state): carry the context.
            plain = embed_context(instruction, earlier)
            return self._stream(step, plain, msgspec.structs.replace(options, resume_session=None))

    def call(self, node: str, prompt: str, *, writes: bool) -> AgentResult:
        """One fresh agent call for a step of Python (a task of implement), output under ``node``.

        The prompt is self-contained (no session is resumed); retryable agent
        errors are retried like an agent step's, twice, after a pause.
        """
        plan = self.ctx.plan
        options = AgentOptions(
            cwd=str(plan.repo),
            allowed_tools=tools_for(plan.agent_type, write=writes),
            model=plan.model or self.settings.model,
            timeout=self.timeout,
        )
        step = AgentStep(name=node, title=node, instruction="", writes=writes)
        for attempt in range(3):
            try:
                result = self._stream(step, prompt, options)
            except AgentError as e:
                if not e.retryable or attempt == 2:
                    raise
                time.sleep(2.0 * (attempt + 1))
                continue
            finally:
                self.ctx.output_buffer().flush()
            return result
        raise AssertionError("unreachable")

    def _stream(self, step: AgentStep, prompt: str, options: AgentOptions) -> AgentResult:
        token = LAUNCHER.set(functools.partial(self._launch, step.name))
        try:
            return self._call(step, prompt, options)
        finally:
            LAUNCHER.reset(token)

    def _launch(
        self, node: str, popen: Callable[[], subprocess.Popen[bytes]]
    ) -> subprocess.Popen[bytes]:
        """Start the agent only while this worker owns the run (``start_agent``); a process
        started but not recorded (the commit failed, SIGTERM came) is killed with its group.
        """
        ctx = self.ctx
        started: list[subprocess.Popen[bytes]] = []

        def spawn() -> subprocess.Popen[bytes]:
            started.append(popen())
            return started[-1]

        try:
            return start_agent(
                ctx.store, ctx.run_id, node, self.executor.name, spawn, epoch=ctx.epoch
            )
        except BaseException:
            for process in started:
                kill_group(process, 0.0)
            raise

    def _call(self, step: AgentStep, prompt: str, options: AgentOptions) -> AgentResult:
        ctx = self.ctx
        if not self.executor.supports("streaming"):
            result = self.executor.execute(prompt, options)
            if result.session_id:
                record_agent_session(
                    ctx.store, ctx.run_id, step.name, result.session_id, epoch=ctx.epoch
                )
            self._output(step.name, OutputItem(kind="text", text=result.text))
            return result
        text = _LineJoiner()
        final: AgentResult | None = None
        for event in self.executor.stream(prompt, options):
            if isinstance(event, TextDelta):
                for line in text.feed(event.text):
                    self._output(step.name, OutputItem(kind="text", text=line))
                continue
            for line in text.drain():
                self._output(step.name, OutputItem(kind="text", text=line))
            final = self._handle(step, event) or final
        for line in text.drain():
            self._output(step.name, OutputItem(kind="text", text=line))
        if final is None:
            raise AgentError("the agent's stream ended without a result", agent=self.executor.name)
        return final

    def _handle(self, step: AgentStep, event: AgentEvent) -> AgentResult | None:
        ctx = self.ctx
        if isinstance(event, SessionStarted) and event.session_id:
            record_agent_session(
                ctx.store, ctx.run_id, step.name, event.session_id, epoch=ctx.epoch
            )
            self._inflight[step.name] = event.session_id
        elif isinstance(event, ToolUse):
            summary = msgspec.json.encode(event.input).decode()[:300]
            self._output(
                step.name,
                OutputItem(
                    kind="tool_use", text=summary, tool_name=event.name, tool_id=event.tool_id
                ),
            )
        elif isinstance(event, ToolResult):
            self._output(
                step.name,
                OutputItem(
                    kind="tool_result",
                    text=event.output[:TOOL_TEXT_LIMIT],
                    tool_id=event.tool_id,
                    is_error=event.is_error,
                ),
            )
        elif isinstance(event, Completed):
            usage = event.result.usage
            with ctx.live.lock:
                ctx.live.tokens += usage.input_tokens + usage.output_tokens
            return event.result
        return None

    def _output(self, node: str, item: OutputItem) -> None:
        if not item.text.strip() and item.kind == "text":
            return
        activity = f"{item.kind} {item.tool_name}" if item.tool_name else item.text
        ctx = self.ctx
        with ctx.live.lock:
            ctx.live.activity = activity[:120]
        ctx.progress.activity(activity)
        ctx.output_buffer().add(node, item)

    def _write_artifact(self, step: AgentStep, text: str, started: float) -> dict[str, Any]:
        """Keep the agent's file if it wrote one during this node; else write the result."""
        assert step.artifact is not None
        ctx = self.ctx
        root = ctx.plan.repo
        # Never through a symbolic link (see shep.git.worktree): a link where the report goes
        # is replaced by the report, not written through.
        try:
            path = inside_worktree(root, step.artifact, leaf_link=True)
        except UnsafePathError as e:
            raise StepFailedError(f"Cannot write {step.artifact}: {e}") from e
        try:
            found = os.lstat(path)
            by_agent = stat.S_ISREG(found.st_mode) and found.st_mtime >= started - 1
        except OSError:
            by_agent = False
        if not by_agent:
            body = text if text.endswith("\n") else text + "\n"
            tmp = path.with_name(f".{path.name}.shep-tmp")
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(body)
                os.replace(tmp, path)
            except OSError as e:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                fix = (
                    "Move that directory away"
                    if os.path.isdir(path)
                    else "Make the repository writable"
                )
                raise ShepError(
                    f"Cannot write {path} ({e.strerror}). {fix}, "
                    f"then `shep resume {ctx.run_id.hex[:8]}`."
                ) from e
        digest = hashlib.sha256(read_inside(root, path)).hexdigest()
        ctx.progress.message(f"wrote {path}" if not by_agent else f"kept the agent's {path}")
        return {
            "node": step.name,
            "path": str(path),
            "sha256": digest,
            "written_by": "agent" if by_agent else "shep",
        }


class _LineJoiner:
    """Turns text deltas into whole lines, so logs show lines, not fragments."""

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, delta: str) -> Iterator[str]:
        self._pending += delta
        *lines, self._pending = self._pending.split("\n")
        yield from lines

    def drain(self) -> Iterator[str]:
        if self._pending:
            pending, self._pending = self._pending, ""
            yield pending
