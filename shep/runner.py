"""Running a workflow for one run: the compiled graph, the agent, heartbeats, events.

The runner is the only place where a workflow meets the event store:

- ``NodeStarted`` and the agent's session id are committed as soon as they
  happen, so ``shep status`` and resume see them at once;
- agent output is recorded in batches (``AgentOutputBuffer``);
- ``NodeCompleted`` (and ``ArtifactWritten``) join the checkpoint of the step
  that holds the node's result, through the checkpointer's outbox, so after a
  crash a node is either completed with its result saved or re-run: never
  completed twice;
- a heartbeat thread records the worker's pid, host and progress;
- every append carries the worker's ``epoch`` (fencing): once the run has a
  newer owner (it was interrupted and resumed while this worker was stopped)
  or has ended (cancelled), appends are refused, and the worker stops its
  agent and returns without writing anything more.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any
from uuid import UUID

import apsw
import msgspec

from commands.complete_run import complete_run
from commands.errors import InvalidTransitionError, WorkerFencedError
from commands.fail_run import fail_run
from commands.mark_interrupted import mark_interrupted
from commands.record_agent_output import AgentOutputBuffer, OutputItem
from commands.record_heartbeat import record_heartbeat
from commands.record_node import record_agent_session, record_node_failed, record_node_started
from commands.run_state import RunState, RunStatus, load_run, next_events
from events.errors import ConcurrencyError, ShepError
from events.runs import (
    AgentSessionRecorded,
    ArtifactWritten,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunCreated,
    Usage,
)
from events.store import EventStore
from projections.database import open_database
from projections.runner import catch_up
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
    create_executor,
    embed_context,
)
from shep.errors import AgentError, AgentSessionNotFoundError
from shep.identity import host_name
from shep.progress import Progress
from shep.secrets import load_token
from shep.settings import Settings
from shep.workflows import AgentStep, Workflow, get_workflow
from shep.workflows.base import WorkflowState, repository_tree, tools_for

TOOL_TEXT_LIMIT = 2000


class WorkerStopped(Exception):
    """The worker got SIGTERM (``shep cancel``, shutdown): stop the graph now."""


@dataclass(frozen=True)
class RunPlan:
    """What a run is, as its ``RunCreated`` event says."""

    run_id: UUID
    workflow: Workflow
    agent_type: str
    repo: Path
    model: str | None
    inputs: dict[str, str]

    @classmethod
    def load(cls, store: EventStore, run_id: UUID) -> RunPlan:
        events = store.load(run_id)
        created = events[0] if events else None
        if not isinstance(created, RunCreated):
            raise ShepError(f"Run {run_id} has no RunCreated event; it cannot be executed.")
        return cls(
            run_id,
            get_workflow(created.workflow),
            created.agent_type,
            Path(created.repo),
            created.model,
            dict(created.inputs),
        )


@dataclass
class _Live:
    """What the heartbeat reports: shared between the graph thread and the heartbeat thread."""

    node: str | None = None
    activity: str | None = None
    tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Runner:
    """Executes one run in this process (the foreground or a background worker)."""

    def __init__(
        self,
        store: EventStore,
        db_path: Path,
        home: Path,
        run_id: UUID,
        settings: Settings,
        *,
        timeout: float | None = None,
        progress: Progress | None = None,
        executor: AgentExecutor | None = None,
    ) -> None:
        self.store = store
        self.db_path = db_path
        self.run_id = run_id
        self.plan = RunPlan.load(store, run_id)
        self.settings = settings
        self.timeout = timeout or settings.values["agent_timeout"]
        self.progress = progress or Progress(len(self.plan.workflow.steps))
        self.executor = executor or self._executor(home)
        self.pid = os.getpid()
        self.host = host_name()
        self._live = _Live()
        self._attempts: dict[str, int] = {}
        self._inflight_sessions: dict[str, str] = {}
        self.epoch = 0
        self._buffer = AgentOutputBuffer(store, run_id)
        self._started = time.monotonic()
        self._saver: Any = None
        #: Set when an append was refused: the run is no longer ours to write.
        self._ended = threading.Event()

    def _executor(self, home: Path) -> AgentExecutor:
        agent_type = self.plan.agent_type
        same = self.settings.agent_type == agent_type
        return create_executor(
            agent_type,
            token=load_token(home, agent_type),
            binary=self.settings.binary if same else None,
            # Lets `shep cancel` find the agent's processes even if this worker is gone.
            env={"SHEP_RUN_ID": self.run_id.hex},
        )

    # -- the run --------------------------------------------------------------------------

    def execute(self, epoch: int) -> RunStatus:
        """Run the graph from its last checkpoint to the end; record how it ended.

        The run must already be running, owned by ``epoch`` (the state that
        ``start_run`` / ``resume_run`` returned). If another owner takes it
        over, or it is cancelled, this returns its status without recording.
        """
        from shep.checkpointer import EventStoreCheckpointSaver

        self.epoch = epoch
        self._buffer = AgentOutputBuffer(self.store, self.run_id, epoch=epoch)
        self._remember_history()
        stop = threading.Event()
        heartbeat = threading.Thread(target=self._heartbeat, args=(stop,), daemon=True)
        heartbeat.start()
        saver = self._saver = EventStoreCheckpointSaver(self.store, self.db_path, epoch=epoch)
        config: Any = {"configurable": {"thread_id": self.run_id.hex}, "recursion_limit": 200}
        try:
            with _terminate_raises():
                graph = self.plan.workflow.build(self._run_step).compile(checkpointer=saver)
                first = saver.get_tuple(config) is None
                inputs = (
                    {
                        "repo": str(self.plan.repo),
                        "inputs": self.plan.inputs,
                        "results": {},
                        "session_id": None,
                    }
                    if first
                    else None
                )
                try:
                    graph.invoke(inputs, config, durability="sync")
                finally:
                    saver.flush()
            return self._finish()
        except (InvalidTransitionError, WorkerFencedError):
            # Someone else ended the run (a cancel) or took it over (a resume while
            # this worker was stopped): it is no longer ours to record.
            return self._gone()
        except (WorkerStopped, KeyboardInterrupt) as e:
            if self._ended.is_set():
                return self._gone()
            reason = (
                "worker stopped by SIGTERM"
                if isinstance(e, WorkerStopped)
                else ("interrupted by the user (Ctrl-C)")
            )
            return self._interrupt(reason)
        except AgentError as e:
            if self._ended.is_set():
                return self._gone()  # the agent was stopped because the run is not ours
            return self._fail(type(e).__name__, str(e))
        except Exception as e:
            if self._ended.is_set():
                return self._gone()
            # Not the agent's fault (a full disk, a bug of ours): keep the run resumable.
            with contextlib.suppress(Exception):
                self._interrupt(f"worker error: {type(e).__name__}: {e}")
            raise
        finally:
            stop.set()
            heartbeat.join(timeout=5)
            self.progress.close()
            with contextlib.suppress(ShepError):
                saver.close()

    def _finish(self) -> RunStatus:
        state = load_run(self.store, self.run_id)
        if state.status is not RunStatus.RUNNING or state.epoch != self.epoch:
            return self._gone()
        missing = [n for n in self.plan.workflow.node_names if n not in state.completed_nodes]
        if missing:
            return self._fail("IncompleteRunError", f"nodes never completed: {', '.join(missing)}")
        elapsed = int((time.monotonic() - self._started) * 1000)
        return complete_run(self.store, self.run_id, duration_ms=elapsed, epoch=self.epoch).status

    def _fail(self, error_type: str, message: str) -> RunStatus:
        with contextlib.suppress(InvalidTransitionError, WorkerFencedError):
            fail_run(
                self.store,
                self.run_id,
                error_type=error_type,
                message=message,
                node=self._live.node,
                epoch=self.epoch,
            )
        return load_run(self.store, self.run_id).status

    def _interrupt(self, reason: str) -> RunStatus:
        with contextlib.suppress(InvalidTransitionError, ConcurrencyError, WorkerFencedError):
            mark_interrupted(
                self.store,
                self.run_id,
                reason=reason,
                detected_by_pid=self.pid,
                detected_by_host=self.host,
                epoch=self.epoch,
            )
        return load_run(self.store, self.run_id).status

    @property
    def fenced(self) -> bool:
        """Whether the run ended or changed owner elsewhere while this worker ran it."""
        return self._ended.is_set()

    def _gone(self) -> RunStatus:
        """The run ended or changed owner elsewhere: stop our agent, record nothing more."""
        self._ended.set()
        _stop_own_agents()
        return load_run(self.store, self.run_id).status

    def _remember_history(self) -> None:
        """Attempts so far per node, and sessions of nodes that never completed (for resume)."""
        for event in self.store.load(self.run_id):
            if isinstance(event, NodeStarted):
                self._attempts[event.node] = max(self._attempts.get(event.node, 0), event.attempt)
            elif isinstance(event, AgentSessionRecorded):
                self._inflight_sessions[event.node] = event.agent_session_id
            elif isinstance(event, NodeCompleted | NodeFailed):
                self._inflight_sessions.pop(event.node, None)

    # -- one node ---------------------------------------------------------------------------

    def _run_step(self, step: AgentStep, state: WorkflowState) -> dict[str, Any]:
        attempt = self._attempts.get(step.name, 0) + 1
        self._attempts[step.name] = attempt
        index = self.plan.workflow.node_names.index(step.name) + 1
        record_node_started(self.store, self.run_id, step.name, attempt=attempt, epoch=self.epoch)
        with self._live.lock:
            self._live.node, self._live.activity = step.name, None
        self.progress.node_started(step.name, index, attempt)
        started_wall = time.time()
        started = time.monotonic()
        try:
            result = self._call_agent(step, state)
        except AgentError as e:
            self._buffer.flush()
            record_node_failed(
                self.store,
                self.run_id,
                step.name,
                duration_ms=int((time.monotonic() - started) * 1000),
                error_type=type(e).__name__,
                message=str(e),
                retryable=e.retryable,
                epoch=self.epoch,
            )
            self.progress.node_finished(step.name, False, str(e))
            raise
        self._buffer.flush()
        duration_ms = int((time.monotonic() - started) * 1000)
        artifact = self._write_artifact(step, result.text, started_wall) if step.artifact else None
        usage = Usage(
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            cache_read_tokens=result.usage.cache_read_tokens,
            cache_write_tokens=result.usage.cache_write_tokens,
            cost_usd=result.usage.cost_usd,
        )
        items: list[tuple[type[Any], dict[str, Any]]] = [
            (
                NodeCompleted,
                {
                    "node": step.name,
                    "duration_ms": duration_ms,
                    "agent_session_id": result.session_id,
                    "usage": usage,
                    "turns": result.turns,
                },
            )
        ]
        if artifact is not None:
            items.insert(0, (ArtifactWritten, artifact))
        self._enqueue_with_checkpoint(items)
        self.progress.node_finished(step.name, True)
        session = result.session_id if self.executor.supports("session-resume") else None
        return {"results": {step.name: result.text}, "session_id": session}

    def _enqueue_with_checkpoint(self, items: list[tuple[type[Any], dict[str, Any]]]) -> None:
        # Joins the transaction of this step's checkpoint: see shep.checkpointer's outbox.
        # The saver is fenced with our epoch, so the batch is refused unless the run is
        # still running and ours (commands.save_checkpoint checks it at this version).
        saver = self._saver
        assert saver is not None, "nodes run only inside execute()"
        run_id = self.run_id

        def build(after: int) -> list[Any]:
            return next_events(RunState(run_id, version=after, status=RunStatus.RUNNING), items)

        saver.enqueue(run_id.hex, build)

    def _call_agent(self, step: AgentStep, state: WorkflowState) -> AgentResult:
        plan = self.plan
        repo = plan.repo
        fields = {"repo": str(repo), "repo_name": repo.name, **plan.inputs}
        if "{tree}" in step.instruction:
            fields["tree"] = repository_tree(repo)
        prompt = step.instruction.format(**fields)
        resumable = self.executor.supports("session-resume")
        session = self._inflight_sessions.get(step.name) or state.get("session_id")
        if not resumable or not session:
            earlier = [(n, t) for n, t in (state.get("results") or {}).items() if n != step.name]
            prompt = embed_context(prompt, earlier)
            session = None
        options = AgentOptions(
            cwd=str(repo),
            allowed_tools=tools_for(plan.agent_type, write=step.writes),
            resume_session=session,
            model=plan.model or self.settings.model,
            timeout=self.timeout,
        )
        try:
            return self._stream(step, prompt, options)
        except AgentSessionNotFoundError:
            # The agent forgot the session (new machine, cleared state): carry the context.
            earlier = [(n, t) for n, t in (state.get("results") or {}).items() if n != step.name]
            plain = embed_context(step.instruction.format(**fields), earlier)
            return self._stream(step, plain, msgspec.structs.replace(options, resume_session=None))

    def _stream(self, step: AgentStep, prompt: str, options: AgentOptions) -> AgentResult:
        if not self.executor.supports("streaming"):
            result = self.executor.execute(prompt, options)
            if result.session_id:
                record_agent_session(
                    self.store, self.run_id, step.name, result.session_id, epoch=self.epoch
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
        if isinstance(event, SessionStarted) and event.session_id:
            record_agent_session(
                self.store, self.run_id, step.name, event.session_id, epoch=self.epoch
            )
            self._inflight_sessions[step.name] = event.session_id
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
            with self._live.lock:
                self._live.tokens += (
                    event.result.usage.input_tokens + event.result.usage.output_tokens
                )
            return event.result
        return None

    def _output(self, node: str, item: OutputItem) -> None:
        if not item.text.strip() and item.kind == "text":
            return
        activity = f"{item.kind} {item.tool_name}" if item.tool_name else item.text
        with self._live.lock:
            self._live.activity = activity[:120]
        self.progress.activity(activity)
        self._buffer.add(node, item)

    def _write_artifact(self, step: AgentStep, text: str, started: float) -> dict[str, Any]:
        """Keep the agent's file if it wrote one during this node; else write the result."""
        assert step.artifact is not None
        path = self.plan.repo / step.artifact
        try:
            by_agent = path.is_file() and path.stat().st_mtime >= started - 1
        except OSError:
            by_agent = False
        if not by_agent:
            body = text if text.endswith("\n") else text + "\n"
            tmp = path.with_name(f".{path.name}.shep-tmp")
            try:
                tmp.write_text(body)
                os.replace(tmp, path)
            except OSError as e:
                raise ShepError(
                    f"Cannot write {path} ({e.strerror}). Make the repository writable, "
                    f"then `shep resume {self.run_id.hex[:8]}`."
                ) from e
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        self.progress.message(f"wrote {path}" if not by_agent else f"kept the agent's {path}")
        return {
            "node": step.name,
            "path": str(path),
            "sha256": digest,
            "written_by": "agent" if by_agent else "shep",
        }

    # -- heartbeat --------------------------------------------------------------------------

    def _heartbeat(self, stop: threading.Event) -> None:
        """Record a heartbeat every interval, and keep the projections caught up meanwhile.

        Catching up here (a writer) means a reader such as ``shep status`` finds
        the projections current instead of paying for a long run's output.
        """
        interval = self.settings.values["heartbeat_interval"]
        projections = open_database(self.db_path)
        try:
            self._beat(stop, interval, projections)
        finally:
            with contextlib.suppress(ShepError):
                catch_up(projections)
            projections.close()

    def _beat(self, stop: threading.Event, interval: float, projections: apsw.Connection) -> None:
        while not stop.wait(interval):
            with self._live.lock:
                node, activity, tokens = self._live.node, self._live.activity, self._live.tokens
            for _ in range(3):
                try:
                    record_heartbeat(
                        self.store,
                        self.run_id,
                        pid=self.pid,
                        host=self.host,
                        node=node,
                        last_activity=activity,
                        tokens_so_far=tokens,
                        epoch=self.epoch,
                    )
                    break
                except ConcurrencyError:
                    continue
                except (InvalidTransitionError, WorkerFencedError):
                    # Cancelled, or resumed by another worker while we were stopped: the
                    # agent's work is no longer wanted. Stop it; the graph thread then
                    # sees the agent fail, finds the run gone, and records nothing.
                    self._ended.set()
                    _stop_own_agents()
                    return
                except ShepError:
                    break
            with contextlib.suppress(ShepError):
                catch_up(projections)


def _stop_own_agents() -> None:
    """Kill the agent process groups this worker started (its children that lead a group).

    Not ``shep cancel``'s search by ``SHEP_RUN_ID``: a newer worker of the same
    run has agents with that variable too, and they must live.
    """
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid, ppid, pgid = int(entry), int(fields[1]), int(fields[2])
        if ppid == me and pgid == pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)


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


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """While running, SIGTERM raises ``WorkerStopped`` in the main thread (agent gets killed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise WorkerStopped()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
