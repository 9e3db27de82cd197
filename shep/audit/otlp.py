"""The audit trail as OpenTelemetry: runs as traces, nodes as spans, decisions as log records.

The output is the OTLP *file exporter* format: JSON lines, each line one
``ExportTraceServiceRequest`` or ``ExportLogsServiceRequest`` in the OTLP/JSON
encoding (hex trace and span ids, camelCase names, enums as integers, 64-bit
integers and times in unix nanoseconds as strings). The file exporter spec
asks for one signal per file; ``signals`` selects them, and the default (both)
is what the Collector's ``otlpjsonfile`` receiver reads, each pipeline taking
the lines of its own signal.

- A run is a trace. Its trace id is the run id's 16 bytes, so a trace found in a
  backend names its run (``shep replay <trace id>``). The root span covers the
  run from ``RunCreated`` to its final event (completed, failed, cancelled); a
  run still going when the export was taken ends at its last exported event.
- Each node execution (every iteration and attempt) is a child span, from its
  ``NodeStarted`` to its ``NodeCompleted`` or ``NodeFailed``. Agent nodes follow
  the GenAI agent conventions (``invoke_agent`` spans) of ``wire.SEMCONV_VERSION``.
- Decisions (answered, approved, rejected; the supervisor's, made or refused;
  users' cosign votes) are log records whose trace and span ids are those of
  the run and of the node span that asked.

Span ids are derived from the run id and the node's name, iteration and
attempt, so the same history always exports the same ids, and a decisions-only
export (no node events) still points at the node span of a full export.

Streams: events come one by one from ``iter_export``; only the runs still open
are held (their finished node spans, until the run ends), and log records go
out in batches.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Literal
from uuid import UUID

from events.inbox_status import DECISION_VERDICTS
from events.run_status import RunStatus
from shep.audit import otlp_wire as wire

if TYPE_CHECKING:
    from pathlib import Path

    from shep.audit.export import ExportFilter

OtlpSignal = Literal["traces", "logs"]
ALL_SIGNALS: frozenset[OtlpSignal] = frozenset({"traces", "logs"})
#: ``gen_ai.provider.name`` for agent types whose provider is fixed; other agents (aider,
#: opencode, ... choose a provider per configuration) report their type as a custom value.
PROVIDERS: Mapping[str, str] = {
    "claude-code": "anthropic",
    "codex": "openai",
    "gemini-cli": "gcp.gemini",
}
_LOG_BATCH = 256
#: How many decided items' asks are kept for the decisions that may follow theirs.
_DECIDED_KEPT = 4096
_FINAL = {
    "RunCompleted": RunStatus.COMPLETED.value,
    "RunFailed": RunStatus.FAILED.value,
    "RunCancelled": RunStatus.CANCELLED.value,
}
#: Decisions that decide their item (its ask is then forgotten), and the others.
_ITEM_DECISIONS = {"QuestionAnswered", "ApprovalGranted", "ApprovalRejected"}
_DECISIONS = _ITEM_DECISIONS | {
    "ApprovalVoted",
    "SupervisorDecisionMade",
    "SupervisorDecisionRefused",
}
_ASKS = {"QuestionAsked", "ApprovalRequested"}


def write_otlp(
    db_path: str | Path,
    flt: ExportFilter,
    out: BinaryIO,
    *,
    signals: Collection[OtlpSignal] = ALL_SIGNALS,
) -> int:
    """Write the export selected by ``flt`` as OTLP JSON lines to ``out``; return the lines.

    Reads one consistent snapshot of the store (``iter_export``). ``signals``
    limits the output to traces or logs (one signal per file, as the file
    exporter spec asks).
    """
    from shep.audit.export import iter_export

    return write_otlp_records(iter_export(db_path, flt), out, signals=signals)


def write_otlp_records(
    records: Iterable[Mapping[str, Any]],
    out: BinaryIO,
    *,
    signals: Collection[OtlpSignal] = ALL_SIGNALS,
) -> int:
    """``write_otlp`` over export event records (``iter_export``'s dicts) already read."""
    unknown = set(signals) - ALL_SIGNALS
    if unknown:
        raise ValueError(f"unknown OTLP signals: {', '.join(sorted(unknown))}")
    writer = _OtlpWriter(out, frozenset(signals))
    for record in records:
        writer.add(record)
    writer.finish()
    return writer.lines


@dataclass
class _NodeSpan:
    span_id: str
    node: str
    kind: str
    iteration: int
    attempt: int
    start: int
    position: int
    session: str | None = None


@dataclass
class _RunTrace:
    run_id: UUID
    start: int
    last: int
    first_position: int
    last_position: int = 0
    status: str = RunStatus.PENDING.value
    created: dict[str, Any] = field(default_factory=dict)
    open_nodes: dict[str, _NodeSpan] = field(default_factory=dict)
    used_ids: set[str] = field(default_factory=set)
    spans: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    error: tuple[str, str] | None = None
    #: The final event's name (RunCompleted, ...) and time, once the run ended.
    final: str | None = None
    end: int | None = None


class _OtlpWriter:
    """Folds export records into spans and log records, writing each request line."""

    def __init__(self, out: BinaryIO, signals: frozenset[OtlpSignal]) -> None:
        self.out = out
        self.traces = "traces" in signals
        self.logs = "logs" in signals
        self.lines = 0
        #: The runs not written yet, and those written, by their stream id's hex.
        self.runs: dict[str, _RunTrace] = {}
        self.ended: set[str] = set()
        self.asked: dict[str, tuple[UUID, str, int]] = {}
        #: The asks of the latest items decided: the supervisor's record of a decision it
        #: made, or a user's overriding it, may follow the item's decision.
        self.decided: dict[str, tuple[UUID, str, int]] = {}
        self.log_batch: list[dict[str, Any]] = []

    def add(self, record: Mapping[str, Any]) -> None:
        topic = str(record["topic"])
        module, _, name = topic.rpartition(":")
        if name in _DECISIONS:
            self._decision(record, name)
        elif name in _ASKS:
            self._ask(record)
        elif module in {"events.runs", "events.features"}:
            self._run_event(record, name)

    def finish(self) -> None:
        for trace in list(self.runs.values()):
            self._emit_run(trace, at=trace.end or trace.last, why=trace.final)
        self.runs.clear()
        self._flush_logs()

    # Runs and nodes ----------------------------------------------------------

    def _run_event(self, record: Mapping[str, Any], name: str) -> None:
        event: Mapping[str, Any] = record.get("event") or {}
        stream = wire.stream_hex(record["stream"])
        if stream in self.ended:
            # After a run's trace was written (a fork of it, its worktree removed): its
            # span is closed, and a second root span would duplicate its id.
            return
        at = wire.time_of(record)
        position = int(record["position"])
        trace = self.runs.get(stream)
        if trace is None:
            # A run whose creation is outside the export (--since) starts where it is seen.
            trace = self.runs[stream] = _RunTrace(UUID(stream), at, at, position)
        if trace.final is not None and name != "RunResumed":
            return  # a failed run's fork or worktree removal: after its span's end
        trace.last = max(trace.last, at)
        trace.last_position = position
        shown = wire.span_event(name, event, at, position)
        if shown is not None:
            trace.events.append(shown)
        if name == "RunCreated":
            trace.start = at
            trace.created = dict(event)
        elif name in ("RunStarted", "RunResumed"):
            trace.status = RunStatus.RUNNING.value
            # A failed run retried goes on in the same trace.
            trace.error = trace.final = trace.end = None
        elif name == "RunSuspended":
            waiting = (
                RunStatus.WAITING_APPROVAL if event.get("approval") else RunStatus.WAITING_ANSWER
            )
            trace.status = waiting.value
        elif name == "NodeStarted":
            self._start_node(trace, event, at, position)
        elif name in ("AgentSessionRecorded", "NodeCompleted", "NodeFailed"):
            self._node_event(trace, name, event, at, position)
        elif name == "RunInterrupted":
            trace.status = RunStatus.INTERRUPTED.value
            reason = f"interrupted: {event.get('reason') or ''}"
            self._close_open_nodes(trace, at, position, ("interrupted", reason))
        elif name in _FINAL:
            self._end_run(trace, name, event, at, position)

    def _end_run(
        self, trace: _RunTrace, name: str, event: Mapping[str, Any], at: int, position: int
    ) -> None:
        """A final event: completed and cancelled runs are written now and forgotten.

        A failed run may still be retried (``shep resume``), going on in the same
        stream, so it is held until the end of the export: its trace then has one
        root span over the whole run.
        """
        trace.status = _FINAL[name]
        trace.final = name
        trace.end = at
        if name == "RunFailed":
            trace.error = (str(event.get("error_type")), str(event.get("message") or ""))
        ended = (trace.status, f"the run was {trace.status} before the node finished")
        self._close_open_nodes(trace, at, position, ended)
        if name != "RunFailed":
            self._emit_run(trace, at=at, why=name)
            del self.runs[trace.run_id.hex]
            self.ended.add(trace.run_id.hex)

    def _node_event(
        self, trace: _RunTrace, name: str, event: Mapping[str, Any], at: int, position: int
    ) -> None:
        key = str(event.get("node"))
        if name == "AgentSessionRecorded":
            if key in trace.open_nodes:
                trace.open_nodes[key].session = event.get("agent_session_id")
            return
        node = trace.open_nodes.pop(key, None)
        if node is not None:
            trace.spans.append(self._node_span(trace, node, event, name, at, position))

    def _start_node(
        self, trace: _RunTrace, event: Mapping[str, Any], at: int, position: int
    ) -> None:
        node = str(event.get("node"))
        if node in trace.open_nodes:
            restarted = ("restarted", "started again before it finished")
            self._close_node(trace, trace.open_nodes.pop(node), at, position, restarted)
        iteration = int(event.get("iteration") or 1)
        attempt = int(event.get("attempt") or 1)
        span_id = wire.node_span_id(trace.run_id, node, iteration, attempt)
        if span_id in trace.used_ids:
            # The same execution numbered twice (a history written before attempts were
            # remembered): the log position keeps the span id unique and still stable.
            span_id = wire.span_id(
                trace.run_id, f"node\0{node}\0{iteration}\0{attempt}\0{position}"
            )
        trace.used_ids.add(span_id)
        trace.open_nodes[node] = _NodeSpan(
            span_id, node, str(event.get("kind") or "agent"), iteration, attempt, at, position
        )

    def _close_open_nodes(
        self, trace: _RunTrace, at: int, position: int | None, error: tuple[str, str] | None
    ) -> None:
        for node in list(trace.open_nodes.values()):
            self._close_node(trace, node, at, position, error)
        trace.open_nodes.clear()

    def _close_node(
        self,
        trace: _RunTrace,
        node: _NodeSpan,
        at: int,
        position: int | None,
        error: tuple[str, str] | None,
    ) -> None:
        """End a node span its own end event did not end.

        With ``error`` (type, message) the run ended or the node restarted before it
        finished; without, the node was still running (or waiting) when the export was
        taken, and the span ends at the run's last exported event.
        """
        if error is None:
            end: dict[str, Any] = {"finished": False}
            trace.spans.append(self._node_span(trace, node, end, "NodeOpen", at, position))
            return
        end = {"error_type": error[0], "message": error[1]}
        trace.spans.append(self._node_span(trace, node, end, "NodeFailed", at, position))

    def _node_span(
        self,
        trace: _RunTrace,
        node: _NodeSpan,
        end: Mapping[str, Any],
        name: str,
        at: int,
        position: int | None,
    ) -> dict[str, Any]:
        created = trace.created
        agent_type = created.get("agent_type")
        usage: Mapping[str, Any] = end.get("usage") or {}
        values: dict[str, object] = {}
        if node.kind == "agent":
            values = {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": node.node,
                "gen_ai.provider.name": PROVIDERS.get(agent_type, agent_type)
                if agent_type
                else None,
                "gen_ai.request.model": created.get("model"),
                "gen_ai.conversation.id": end.get("agent_session_id") or node.session,
            }
            if name == "NodeCompleted":
                values["gen_ai.usage.input_tokens"] = int(usage.get("input_tokens") or 0)
                values["gen_ai.usage.output_tokens"] = int(usage.get("output_tokens") or 0)
        values.update(
            {
                "shep.run.id": trace.run_id.hex,
                "shep.agent.type": agent_type,
                "shep.node.name": node.node,
                "shep.node.kind": node.kind,
                "shep.node.iteration": node.iteration,
                "shep.node.attempt": node.attempt,
                "shep.node.duration_ms": end.get("duration_ms"),
                "shep.node.waited_ms": end.get("waited_ms"),
                "shep.node.turns": end.get("turns"),
                "shep.node.snapshot": end.get("snapshot"),
                "shep.usage.cache_read_tokens": usage.get("cache_read_tokens") or None,
                "shep.usage.cache_write_tokens": usage.get("cache_write_tokens") or None,
                "shep.usage.cost_usd": usage.get("cost_usd"),
                "shep.log.start_position": node.position,
                "shep.log.end_position": position,
                "shep.node.finished": end.get("finished"),
            }
        )
        status: dict[str, Any] | None = None
        if name == "NodeFailed":
            values["error.type"] = str(end.get("error_type") or "_OTHER")
            values["shep.node.retryable"] = end.get("retryable")
            status = {"code": wire.STATUS_ERROR, "message": str(end.get("message") or "")}
        label = f"invoke_agent {node.node}" if node.kind == "agent" else f"{node.kind} {node.node}"
        return wire.span(
            trace_id=wire.trace_id(trace.run_id),
            span_id=node.span_id,
            parent=wire.run_span_id(trace.run_id),
            name=label,
            start=node.start,
            end=at,
            attributes=wire.attributes(values),
            status=status,
        )

    def _emit_run(self, trace: _RunTrace, *, at: int, why: str | None) -> None:
        if not self.traces:
            return
        self._close_open_nodes(trace, at, None, None)
        created = trace.created
        workflow = created.get("workflow")
        values: dict[str, object] = {
            "shep.run.id": trace.run_id.hex,
            "shep.run.status": trace.status,
            "shep.workflow.name": workflow,
            "shep.agent.type": created.get("agent_type"),
            "shep.model": created.get("model"),
            "shep.run.created_by": created.get("created_by"),
            "shep.repo": created.get("repo"),
            "shep.run.origin_run_id": created.get("origin_run_id"),
            "shep.run.origin_checkpoint_id": created.get("origin_checkpoint_id"),
            "shep.run.finished": why is not None,
            "shep.log.start_position": trace.first_position,
            "shep.log.end_position": trace.last_position,
        }
        links: list[dict[str, Any]] = []
        origin = created.get("origin_run_id")
        if origin:
            # A fork: its trace links to the run it was forked from.
            origin_id = UUID(str(origin))
            links.append(
                {
                    "traceId": wire.trace_id(origin_id),
                    "spanId": wire.run_span_id(origin_id),
                    "attributes": wire.attributes(
                        {"shep.fork.checkpoint_id": created.get("origin_checkpoint_id")}
                    ),
                }
            )
        status = None
        if trace.error is not None:
            values["error.type"] = trace.error[0]
            status = {"code": wire.STATUS_ERROR, "message": trace.error[1]}
        root = wire.span(
            trace_id=wire.trace_id(trace.run_id),
            span_id=wire.run_span_id(trace.run_id),
            parent=None,
            name=f"run {workflow}" if workflow else "run",
            start=trace.start,
            end=at,
            attributes=wire.attributes(values),
            status=status,
            events=trace.events,
            links=links,
        )
        self._write(
            {
                "resourceSpans": [
                    {
                        "resource": wire.resource(),
                        "scopeSpans": [
                            {
                                "scope": wire.scope(),
                                "spans": [root, *trace.spans],
                                "schemaUrl": wire.SCHEMA_URL,
                            }
                        ],
                        "schemaUrl": wire.SCHEMA_URL,
                    }
                ]
            }
        )

    # Decisions ---------------------------------------------------------------

    def _ask(self, record: Mapping[str, Any]) -> None:
        event: Mapping[str, Any] = record.get("event") or {}
        run = record.get("run") or event.get("run_id")
        if run is None:
            return
        self.asked[str(record["stream"])] = (
            UUID(str(run)),
            str(record.get("node") or event.get("node")),
            int(event.get("iteration") or 1),
        )

    def _decision(self, record: Mapping[str, Any], name: str) -> None:
        event: Mapping[str, Any] = record.get("event") or {}
        item = str(record.get("item") or record["stream"])
        asked = self.asked.get(item) or self.decided.get(item)
        if name in _ITEM_DECISIONS and item in self.asked:
            self.decided[item] = self.asked.pop(item)
            if len(self.decided) > _DECIDED_KEPT:
                del self.decided[next(iter(self.decided))]
        run_value = record.get("run") or event.get("run_id") or (asked and asked[0])
        run_id = UUID(str(run_value)) if run_value else None
        node = record.get("node") or event.get("node") or (asked[1] if asked else None)
        verdict = str(
            record.get("verdict") or DECISION_VERDICTS.get(name) or event.get("decision") or ""
        )
        actor = str(record.get("actor") or event.get("actor") or "")
        reason = record.get("reason") or event.get("rationale") or None
        answer = record.get("answer") or event.get("answer") or None
        if not self.logs:
            return
        at = wire.time_of(record)
        log: dict[str, Any] = {
            "timeUnixNano": str(at),
            "observedTimeUnixNano": str(at),
            "severityNumber": wire.SEVERITY_INFO,
            "severityText": "INFO",
            "body": {
                "stringValue": wire.verdict_line(verdict, actor, answer=answer, reason=reason)
            },
            "attributes": wire.attributes(
                {
                    "shep.decision.verdict": verdict,
                    "shep.decision.actor": actor,
                    "shep.item.id": item,
                    "shep.run.id": run_id.hex if run_id else None,
                    "shep.node.name": node,
                    "shep.decision.reason": reason,
                    "shep.decision.answer": answer,
                    "shep.decision.option_id": event.get("option_id"),
                    "shep.decision.policy": record.get("policy") or event.get("policy"),
                    "shep.decision.prompt_version": record.get("prompt_version"),
                    "shep.decision.seen_hash": record.get("seen_hash"),
                    **wire.details(event),
                    "shep.log.position": int(record["position"]),
                    "shep.log.chain_hash": record.get("chain_hash"),
                }
            ),
        }
        if run_id is not None:
            log["traceId"] = wire.trace_id(run_id)
            span = self._asking_span(run_id, str(node) if node else None, asked)
            if span is not None:
                log["spanId"] = span
        self.log_batch.append(log)
        if len(self.log_batch) >= _LOG_BATCH:
            self._flush_logs()

    def _asking_span(
        self, run_id: UUID, node: str | None, asked: tuple[UUID, str, int] | None
    ) -> str | None:
        """The node span that asked: the one open now, else the ask's first attempt."""
        trace = self.runs.get(run_id.hex)
        if trace is not None and node is not None and node in trace.open_nodes:
            return trace.open_nodes[node].span_id
        if asked is not None:
            return wire.node_span_id(run_id, asked[1], asked[2], 1)
        return None

    def _flush_logs(self) -> None:
        if not self.log_batch:
            return
        batch, self.log_batch = self.log_batch, []
        self._write(
            {
                "resourceLogs": [
                    {
                        "resource": wire.resource(),
                        "scopeLogs": [
                            {
                                "scope": wire.scope(),
                                "logRecords": batch,
                                "schemaUrl": wire.SCHEMA_URL,
                            }
                        ],
                        "schemaUrl": wire.SCHEMA_URL,
                    }
                ]
            }
        )

    def _write(self, request: dict[str, Any]) -> None:
        self.out.write(wire.encode(request) + b"\n")
        self.lines += 1
