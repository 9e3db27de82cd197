"""``write_otlp``: the log as OTLP file-exporter JSON lines, read back with the official protos."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, SeverityNumber
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from commands.answer_question import answer_question
from commands.approve_item import approve_item
from commands.complete_run import complete_run
from commands.create_run import create_run
from commands.fail_run import fail_run
from commands.mark_interrupted import mark_interrupted
from commands.record_node import (
    record_agent_session,
    record_node_completed,
    record_node_failed,
    record_node_started,
)
from commands.reject_item import reject_item
from commands.resume_run import resume_run
from commands.run_state import append_to_run
from commands.start_run import start_run
from commands.suspend_run import Ask, suspend_run
from events.features import FeatureMerged, WorktreeRemoved
from events.inbox import QuestionOption, item_stream_id
from events.runs import RunForked, Usage
from events.store import EventStore
from shep.audit.export import ExportFilter
from shep.audit.otlp import write_otlp
from shep.audit.otlp_wire import (
    SCHEMA_URL,
    SEMCONV_VERSION,
    node_span_id,
    run_span_id,
)

MERGE_COMMIT = "3f2a9c1d5e7b8a0c4d6e1f2a3b5c7d9e0f1a2b3c"


@dataclass
class History:
    """The runs and items ``build_history`` wrote."""

    feature: UUID
    failed: UUID
    waiting: UUID
    approved: UUID
    answered: UUID
    rejected: UUID
    pending: UUID


def build_history(store: EventStore) -> History:
    """Three runs through the real commands.

    ``feature`` (claude-code): analyze; plan interrupted and retried; an approval
    granted; a question answered; a merge; completed. ``failed`` (codex): its
    scan node fails, the run fails. ``waiting`` (gemini-cli): a gate rejected,
    then asked again and still waiting when the export is taken.
    """
    feature = create_run(
        store,
        workflow="feature",
        agent_type="claude-code",
        model="claude-sonnet-4-5",
        repo="/repo/app",
        node_names=["analyze", "plan", "plan-gate", "clarify"],
        created_by="user:alice",
    )
    epoch = start_run(store, feature, pid=10, host="box").epoch
    record_node_started(store, feature, "analyze", epoch=epoch)
    record_agent_session(store, feature, "analyze", "sess-analyze")
    record_node_completed(
        store,
        feature,
        "analyze",
        duration_ms=1500,
        agent_session_id="sess-analyze",
        usage=Usage(input_tokens=1200, output_tokens=345, cost_usd=0.02),
        turns=3,
        epoch=epoch,
    )
    record_node_started(store, feature, "plan", epoch=epoch)
    mark_interrupted(store, feature, reason="worker gone", epoch=epoch)
    epoch = resume_run(store, feature, pid=11, host="box").epoch
    record_node_started(store, feature, "plan", attempt=2, epoch=epoch)
    record_node_completed(
        store, feature, "plan", duration_ms=900, usage=Usage(input_tokens=7, output_tokens=8)
    )
    gate = Ask(interrupt_id="gate-1", kind="approval", node="plan-gate", summary="Plan ok?")
    suspend_run(store, feature, [gate], epoch=epoch)
    approved = item_stream_id(feature, "gate-1")
    approve_item(store, approved, actor="user:alice", comment="ship it")
    epoch = resume_run(store, feature, pid=12, host="box").epoch
    record_node_completed(store, feature, "plan-gate", duration_ms=1)
    question = Ask(
        interrupt_id="q-1",
        kind="question",
        node="clarify",
        question="Which database?",
        options=[
            QuestionOption(id="a", label="SQLite", recommended=True),
            QuestionOption(id="b", label="Postgres"),
        ],
    )
    suspend_run(store, feature, [question], epoch=epoch)
    answered = item_stream_id(feature, "q-1")
    answer_question(store, answered, actor="user:bob", option_id="a")
    epoch = resume_run(store, feature, pid=13, host="box").epoch
    record_node_completed(store, feature, "clarify", duration_ms=1)
    merged = {"into": "main", "commit": MERGE_COMMIT, "files": 2, "added": 10}
    append_to_run(store, feature, [(FeatureMerged, {**merged, "removed": 1, "commits": 3})])
    complete_run(store, feature, duration_ms=5000)

    failed = create_run(
        store,
        workflow="analyze-repository",
        agent_type="codex",
        repo="/repo/lib",
        node_names=["scan"],
        created_by="user:alice",
    )
    epoch = start_run(store, failed, pid=20, host="box").epoch
    record_node_started(store, failed, "scan", epoch=epoch)
    record_node_failed(
        store, failed, "scan", duration_ms=30, error_type="AgentExitError", message="exit 2"
    )
    fail_run(store, failed, error_type="AgentExitError", message="exit 2", node="scan")

    waiting = create_run(
        store,
        workflow="feature",
        agent_type="gemini-cli",
        repo="/repo/web",
        node_names=["spec-gate"],
        created_by="user:carol",
    )
    epoch = start_run(store, waiting, pid=30, host="box").epoch
    first = Ask(interrupt_id="g-1", kind="approval", node="spec-gate", summary="Spec ok?")
    suspend_run(store, waiting, [first], epoch=epoch)
    rejected = item_stream_id(waiting, "g-1")
    reject_item(store, rejected, actor="user:carol", reason="too vague", policy="manual")
    epoch = resume_run(store, waiting, pid=31, host="box").epoch
    record_node_completed(store, waiting, "spec-gate", duration_ms=1)
    again = Ask(interrupt_id="g-2", kind="approval", node="spec-gate", iteration=2, summary="Now?")
    suspend_run(store, waiting, [again], epoch=epoch)
    return History(
        feature=feature,
        failed=failed,
        waiting=waiting,
        approved=approved,
        answered=answered,
        rejected=rejected,
        pending=item_stream_id(waiting, "g-2"),
    )


@pytest.fixture
def history(store: EventStore) -> History:
    return build_history(store)


_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids_to_base64(value: Any) -> Any:
    """OTLP/JSON writes ids as hex where proto3 JSON has base64: convert them for ``Parse``."""
    if isinstance(value, dict):
        return {
            k: base64.b64encode(bytes.fromhex(v)).decode()
            if k in _ID_FIELDS
            else _hex_ids_to_base64(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids_to_base64(v) for v in value]
    return value


@dataclass
class Parsed:
    lines: list[dict[str, Any]]
    traces: list[ExportTraceServiceRequest]
    logs: list[ExportLogsServiceRequest]

    @property
    def spans(self) -> list[Span]:
        return [
            span
            for request in self.traces
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    @property
    def log_records(self) -> list[LogRecord]:
        return [
            record
            for request in self.logs
            for resource in request.resource_logs
            for scope in resource.scope_logs
            for record in scope.log_records
        ]


def export(db_path: Path, flt: ExportFilter | None = None, **options: Any) -> Parsed:
    """Run ``write_otlp`` and parse every line with the official protobuf definitions."""
    out = io.BytesIO()
    written = write_otlp(db_path, flt or ExportFilter(), out, **options)
    raw_lines = out.getvalue().splitlines()
    assert len(raw_lines) == written
    parsed = Parsed([], [], [])
    for raw in raw_lines:
        line = json.loads(raw)
        parsed.lines.append(line)
        converted = json.dumps(_hex_ids_to_base64(line))
        if "resourceSpans" in line:
            assert set(line) == {"resourceSpans"}
            parsed.traces.append(json_format.Parse(converted, ExportTraceServiceRequest()))
        else:
            assert set(line) == {"resourceLogs"}
            parsed.logs.append(json_format.Parse(converted, ExportLogsServiceRequest()))
    return parsed


def attrs(kvs: Any) -> dict[str, Any]:
    """Attribute key-values as a plain dict of their values."""
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind)
    return out


def run_spans(parsed: Parsed, run_id: UUID) -> tuple[Span, list[Span]]:
    spans = [s for s in parsed.spans if s.trace_id == run_id.bytes]
    roots = [s for s in spans if not s.parent_span_id]
    assert len(roots) == 1
    return roots[0], [s for s in spans if s.parent_span_id]


def test_every_line_is_an_otlp_request_with_pinned_schema(db_path: Path, history: History) -> None:
    """Each line parses as an ExportTraceServiceRequest or ExportLogsServiceRequest (official
    protos); every resource and scope names the pinned semantic-conventions schema.
    """
    parsed = export(db_path)
    assert len(parsed.traces) == 3  # one per run
    assert len(parsed.logs) == 1  # three decisions, one batch
    assert f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}" == SCHEMA_URL
    for request in parsed.traces:
        for resource in request.resource_spans:
            assert resource.schema_url == SCHEMA_URL
            assert attrs(resource.resource.attributes)["service.name"] == "shep"
            assert all(scope.schema_url == SCHEMA_URL for scope in resource.scope_spans)
    for request in parsed.logs:
        for resource in request.resource_logs:
            assert resource.schema_url == SCHEMA_URL
            assert all(scope.schema_url == SCHEMA_URL for scope in resource.scope_logs)
    for span in parsed.spans:
        assert len(span.trace_id) == 16
        assert len(span.span_id) == 8
        assert span.end_time_unix_nano >= span.start_time_unix_nano > 0
    # 64-bit integers are decimal strings, as OTLP/JSON writes them.
    first = parsed.lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert isinstance(first["startTimeUnixNano"], str)


def test_node_spans_are_children_of_their_run_span(db_path: Path, history: History) -> None:
    """A run is one trace (id: the run id's bytes); each node execution, every attempt and
    iteration, is a child of the run's root span in the same trace.
    """
    parsed = export(db_path)
    expected_nodes = {
        history.feature: ["analyze", "plan", "plan", "plan-gate", "clarify"],
        history.failed: ["scan"],
        history.waiting: ["spec-gate", "spec-gate"],
    }
    for run_id, nodes in expected_nodes.items():
        root, children = run_spans(parsed, run_id)
        assert root.span_id == bytes.fromhex(run_span_id(run_id))
        assert root.trace_id == run_id.bytes
        assert sorted(attrs(s.attributes)["shep.node.name"] for s in children) == sorted(nodes)
        for child in children:
            assert child.parent_span_id == root.span_id
            assert child.trace_id == root.trace_id
            assert root.start_time_unix_nano <= child.start_time_unix_nano
            assert child.end_time_unix_nano <= root.end_time_unix_nano
    assert len({s.span_id for s in parsed.spans}) == len(parsed.spans)


def test_agent_nodes_carry_genai_attributes(db_path: Path, history: History) -> None:
    """Agent nodes are ``invoke_agent`` spans: agent name, provider from the agent type, the
    requested model, the session and token usage; human nodes are not GenAI operations.
    """
    parsed = export(db_path)
    root, children = run_spans(parsed, history.feature)
    by_name = {(attrs(s.attributes)["shep.node.name"], s.name): s for s in children}
    analyze = by_name[("analyze", "invoke_agent analyze")]
    values = attrs(analyze.attributes)
    assert values["gen_ai.operation.name"] == "invoke_agent"
    assert values["gen_ai.agent.name"] == "analyze"
    assert values["gen_ai.provider.name"] == "anthropic"
    assert values["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert values["gen_ai.conversation.id"] == "sess-analyze"
    assert values["gen_ai.usage.input_tokens"] == 1200
    assert values["gen_ai.usage.output_tokens"] == 345
    assert values["shep.usage.cost_usd"] == pytest.approx(0.02)
    assert values["shep.node.turns"] == 3
    assert analyze.kind == Span.SPAN_KIND_INTERNAL
    assert analyze.status.code == Status.STATUS_CODE_UNSET

    gate = by_name[("plan-gate", "approval plan-gate")]
    gate_values = attrs(gate.attributes)
    assert "gen_ai.operation.name" not in gate_values
    assert gate_values["shep.node.kind"] == "approval"

    root_values = attrs(root.attributes)
    assert root.name == "run feature"
    assert root_values["shep.run.status"] == "completed"
    assert root_values["shep.agent.type"] == "claude-code"
    merged = [e for e in root.events if e.name == "shep.feature.merged"]
    assert attrs(merged[0].attributes)["vcs.ref.head.revision"] == MERGE_COMMIT

    _, (scan,) = run_spans(parsed, history.failed)
    assert attrs(scan.attributes)["gen_ai.provider.name"] == "openai"
    assert "gen_ai.request.model" not in attrs(scan.attributes)  # not known for this run


def test_failures_and_interruptions_are_error_spans(db_path: Path, history: History) -> None:
    """A failed node and run have ERROR status and ``error.type``; a node cut off by the
    run's interruption ends there as an error, and its retry is a span of its own.
    """
    parsed = export(db_path)
    failed_root, (scan,) = run_spans(parsed, history.failed)
    assert scan.status.code == Status.STATUS_CODE_ERROR
    assert scan.status.message == "exit 2"
    assert attrs(scan.attributes)["error.type"] == "AgentExitError"
    assert failed_root.status.code == Status.STATUS_CODE_ERROR
    assert attrs(failed_root.attributes)["shep.run.status"] == "failed"

    _, children = run_spans(parsed, history.feature)
    plans = sorted(
        (s for s in children if attrs(s.attributes)["shep.node.name"] == "plan"),
        key=lambda s: attrs(s.attributes)["shep.node.attempt"],
    )
    assert [attrs(s.attributes)["shep.node.attempt"] for s in plans] == [1, 2]
    assert plans[0].status.code == Status.STATUS_CODE_ERROR
    assert attrs(plans[0].attributes)["error.type"] == "interrupted"
    assert plans[1].status.code == Status.STATUS_CODE_UNSET
    assert plans[1].span_id == bytes.fromhex(node_span_id(history.feature, "plan", 1, 2))


def test_a_waiting_run_ends_at_its_last_event(db_path: Path, history: History) -> None:
    """A run still waiting when the export is taken: its root span and the node waiting for
    a decision end at its last exported event, not finished and not errors.
    """
    parsed = export(db_path)
    root, children = run_spans(parsed, history.waiting)
    values = attrs(root.attributes)
    assert values["shep.run.status"] == "waiting_approval"
    assert values["shep.run.finished"] is False
    assert root.status.code == Status.STATUS_CODE_UNSET
    open_gate = [s for s in children if attrs(s.attributes)["shep.node.iteration"] == 2]
    assert len(open_gate) == 1
    assert attrs(open_gate[0].attributes)["shep.node.finished"] is False
    assert open_gate[0].status.code == Status.STATUS_CODE_UNSET
    assert open_gate[0].end_time_unix_nano == root.end_time_unix_nano


def test_decisions_are_log_records_in_the_asking_node_span(db_path: Path, history: History) -> None:
    """Each decision is a log record: the verdict line as body, actor, item, run, node and
    reason as attributes, and the trace and span ids of the node span that asked.
    """
    parsed = export(db_path)
    spans = {s.span_id: s for s in parsed.spans}
    records = {attrs(r.attributes)["shep.item.id"]: r for r in parsed.log_records}
    assert set(records) == {history.approved.hex, history.answered.hex, history.rejected.hex}

    cases = [
        (history.approved, history.feature, "plan-gate", "approved by user:alice: ship it"),
        (history.answered, history.feature, "clarify", "answered 'SQLite' by user:bob"),
        (history.rejected, history.waiting, "spec-gate", "rejected by user:carol: too vague"),
    ]
    for item, run_id, node, body in cases:
        record = records[item.hex]
        values = attrs(record.attributes)
        assert record.body.string_value == body
        assert record.severity_number == SeverityNumber.SEVERITY_NUMBER_INFO
        assert values["shep.run.id"] == run_id.hex
        assert values["shep.node.name"] == node
        assert record.trace_id == run_id.bytes
        asked = spans[record.span_id]
        assert asked.trace_id == run_id.bytes
        assert attrs(asked.attributes)["shep.node.name"] == node
        assert asked.start_time_unix_nano <= record.time_unix_nano <= asked.end_time_unix_nano
    rejected = attrs(records[history.rejected.hex].attributes)
    assert rejected["shep.decision.actor"] == "user:carol"
    assert rejected["shep.decision.reason"] == "too vague"
    assert rejected["shep.decision.policy"] == "manual"
    assert rejected["shep.decision.verdict"] == "rejected"
    assert len(rejected["shep.decision.seen_hash"]) == 64
    answered = attrs(records[history.answered.hex].attributes)
    assert answered["shep.decision.answer"] == "SQLite"
    assert answered["shep.decision.option_id"] == "a"


def test_a_decisions_export_correlates_to_the_same_spans(db_path: Path, history: History) -> None:
    """``--kind decisions`` has no node events, yet its log records point at the same trace
    and span ids as the full export's node spans (ids are derived, not counted).
    """
    full = {
        attrs(r.attributes)["shep.item.id"]: (r.trace_id, r.span_id)
        for r in export(db_path).log_records
    }
    only = export(db_path, ExportFilter(kind="decisions"))
    assert only.traces == []
    assert {
        attrs(r.attributes)["shep.item.id"]: (r.trace_id, r.span_id) for r in only.log_records
    } == full


def test_signals_select_one_kind_per_file(db_path: Path, history: History) -> None:
    """The file exporter spec wants one signal per file: ``signals`` writes only those."""
    traces = export(db_path, signals=("traces",))
    assert traces.logs == []
    assert len(traces.traces) == 3
    logs = export(db_path, signals=("logs",))
    assert logs.traces == []
    assert len(logs.log_records) == 3
    with pytest.raises(ValueError, match="metrics"):
        write_otlp(db_path, ExportFilter(), io.BytesIO(), signals=("metrics",))  # type: ignore[arg-type]


def test_one_run_only_and_same_bytes_twice(db_path: Path, history: History) -> None:
    """``--run`` exports that run's trace and its decisions; the output is deterministic."""
    first = io.BytesIO()
    write_otlp(db_path, ExportFilter(run_id=history.waiting.hex[:8]), first)
    second = io.BytesIO()
    write_otlp(db_path, ExportFilter(run_id=history.waiting.hex[:8]), second)
    assert first.getvalue() == second.getvalue()
    parsed = export(db_path, ExportFilter(run_id=history.waiting.hex))
    assert {s.trace_id for s in parsed.spans} == {history.waiting.bytes}
    assert [attrs(r.attributes)["shep.item.id"] for r in parsed.log_records] == [
        history.rejected.hex
    ]


def test_an_empty_store_writes_nothing(db_path: Path, store: EventStore) -> None:
    """No events: no lines (an empty OTLP file is valid)."""
    assert export(db_path).lines == []


def test_a_retried_failed_run_is_one_trace_and_late_events_add_no_span(
    db_path: Path, store: EventStore
) -> None:
    """A failed run resumed (``shep resume``) goes on in one trace with one root span; a
    fork or worktree removal recorded after the run ended adds no second root span; the
    fork's own trace links to the run it came from.
    """
    run_id = create_run(
        store,
        workflow="feature",
        agent_type="claude-code",
        repo="/repo/app",
        node_names=["scan"],
        created_by="user:alice",
    )
    start_run(store, run_id, pid=1, host="box")
    record_node_started(store, run_id, "scan")
    record_node_failed(
        store, run_id, "scan", duration_ms=5, error_type="AgentExitError", message="x"
    )
    fail_run(store, run_id, error_type="AgentExitError", message="x", node="scan")
    resume_run(store, run_id, pid=2, host="box")
    record_node_started(store, run_id, "scan", attempt=2)
    record_node_completed(store, run_id, "scan", duration_ms=5)
    complete_run(store, run_id, duration_ms=10)
    fork_id = create_run(
        store,
        workflow="feature",
        agent_type="claude-code",
        repo="/repo/app",
        node_names=["scan"],
        created_by="user:alice",
        origin_run_id=run_id,
        origin_checkpoint_id="cp-1",
    )
    late = {"fork_run_id": fork_id, "checkpoint_id": "cp-1", "forked_by": "user:alice"}
    append_to_run(store, run_id, [(RunForked, {**late, "restore": "both"})])
    removed = {"path": "/wt", "branch": "shep/x", "branch_deleted": True}
    append_to_run(
        store, run_id, [(WorktreeRemoved, {**removed, "removed_by": "u", "reason": "gc"})]
    )

    parsed = export(db_path)
    root, children = run_spans(parsed, run_id)
    assert root.status.code == Status.STATUS_CODE_UNSET
    assert attrs(root.attributes)["shep.run.status"] == "completed"
    assert [e.name for e in root.events].count("shep.run.failed") == 1
    assert sorted(attrs(s.attributes)["shep.node.attempt"] for s in children) == [1, 2]
    assert all(s.parent_span_id == root.span_id for s in children)
    assert len({s.span_id for s in parsed.spans}) == len(parsed.spans)

    fork_root, _ = run_spans(parsed, fork_id)
    (link,) = fork_root.links
    assert link.trace_id == run_id.bytes
    assert link.span_id == root.span_id
    assert attrs(link.attributes)["shep.fork.checkpoint_id"] == "cp-1"
