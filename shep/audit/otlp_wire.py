"""The OTLP/JSON encoding of shep's traces and logs: ids, times, attributes, spans, span
events, the resource and the scope, after the OpenTelemetry semantic conventions
``SEMCONV_VERSION`` (GenAI agent spans). ``shep.audit.otlp`` folds an export into them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import msgspec

from events.inbox_status import ItemStatus
from events.supervisor import SupervisorVerdict
from shep import __version__

#: The OpenTelemetry semantic-conventions release the attributes follow (GenAI agent spans:
#: ``gen_ai.provider.name``, as renamed from ``gen_ai.system`` in this release).
SEMCONV_VERSION = "1.37.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
#: The instrumentation scope named in every request.
SCOPE_NAME = "shep.audit"
SPAN_KIND_INTERNAL = 1
STATUS_ERROR = 2
SEVERITY_INFO = 9
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
encode = msgspec.json.Encoder().encode


def trace_id(run_id: UUID) -> str:
    """The trace id of a run: its 16 bytes, in hex."""
    return run_id.hex


def run_span_id(run_id: UUID) -> str:
    """The root span id of a run's trace."""
    return span_id(run_id, "run")


def node_span_id(run_id: UUID, node: str, iteration: int, attempt: int) -> str:
    """The span id of one execution of a node (its iteration and attempt)."""
    return span_id(run_id, f"node\0{node}\0{iteration}\0{attempt}")


def span_id(run_id: UUID, key: str) -> str:
    digest = hashlib.sha256(run_id.bytes + b"\0" + key.encode()).digest()
    # An all-zero span id is invalid in OTLP; 2**-64 odds, but say what happens then.
    return (digest[:8] if any(digest[:8]) else digest[8:16]).hex()


def unix_nanos(at: str) -> int:
    """An ISO 8601 time (timezone-aware, or UTC) in nanoseconds since the epoch, exactly."""
    when = datetime.fromisoformat(at)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return ((when - EPOCH) // MICROSECOND) * 1000


def attribute(key: str, value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        wrapped: dict[str, Any] = {"boolValue": value}
    elif isinstance(value, int):
        wrapped = {"intValue": str(value)}
    elif isinstance(value, float):
        wrapped = {"doubleValue": value}
    else:
        wrapped = {"stringValue": str(value)}
    return {"key": key, "value": wrapped}


def attributes(values: Mapping[str, object]) -> list[dict[str, Any]]:
    """OTLP key-values for the values that are known (None is left out)."""
    return [attribute(k, v) for k, v in values.items() if v is not None]


def details(event: Mapping[str, Any]) -> dict[str, object]:
    """A decision's ``DETAIL_FIELDS`` (the supervisor's evidence, overrides, cosigning, who
    decided first) as ``shep.decision.*`` attributes; ``rules`` as canonical JSON text."""
    from shep.audit.export import DETAIL_FIELDS, canonical

    details: dict[str, object] = {}
    for key in DETAIL_FIELDS:
        value = event.get(key)
        if isinstance(value, list | dict):
            value = canonical(value).decode()
        details[f"shep.decision.{key}"] = value
    return details


def verdict_line(verdict: str, actor: str, *, answer: str | None, reason: str | None) -> str:
    """A decision in one line: ``approved by user:alice: looks fine``."""
    answered = verdict in (ItemStatus.ANSWERED, SupervisorVerdict.ANSWER)
    said = f"answered {answer!r}" if answered and answer else verdict
    line = f"{said} by {actor}" if actor else said
    return f"{line}: {reason}" if reason else line


def stream_hex(stream: object) -> str:
    """A stream id as the log stores it (32 hex digits), whatever form it came in."""
    text = str(stream)
    return text if len(text) == 32 else UUID(text).hex


def time_of(record: Mapping[str, Any]) -> int:
    at = record.get("at") or (record.get("event") or {}).get("timestamp")
    return unix_nanos(str(at))


def span(
    *,
    trace_id: str,
    span_id: str,
    parent: str | None,
    name: str,
    start: int,
    end: int,
    attributes: list[dict[str, Any]],
    status: dict[str, Any] | None,
    events: list[dict[str, Any]] | None = None,
    links: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    span: dict[str, Any] = {"traceId": trace_id, "spanId": span_id}
    if parent is not None:
        span["parentSpanId"] = parent
    span.update(
        {
            "name": name,
            "kind": SPAN_KIND_INTERNAL,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(max(start, end)),
            "attributes": attributes,
        }
    )
    if events:
        span["events"] = events
    if links:
        span["links"] = links
    if status is not None:
        span["status"] = status
    return span


#: Run events shown as events of the run's span, and the attributes they carry.
SPAN_EVENTS: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "RunStarted": (
        "shep.run.started",
        {"process.pid": "pid", "host.name": "host", "shep.worker.epoch": "epoch"},
    ),
    "RunResumed": (
        "shep.run.resumed",
        {"process.pid": "pid", "host.name": "host", "shep.worker.epoch": "epoch"},
    ),
    "RunSuspended": ("shep.run.suspended", {"shep.approval": "approval"}),
    "RunInterrupted": ("shep.run.interrupted", {"shep.reason": "reason"}),
    "RunCancelled": ("shep.run.cancelled", {"shep.cancelled_by": "cancelled_by"}),
    "RunFailed": ("shep.run.failed", {"error.type": "error_type", "shep.message": "message"}),
    "RunForked": (
        "shep.run.forked",
        {"shep.fork.run_id": "fork_run_id", "shep.fork.checkpoint_id": "checkpoint_id"},
    ),
    "RunMigrated": (
        "shep.run.migrated",
        {"shep.workflow.from_version": "from_version", "shep.workflow.to_version": "to_version"},
    ),
    "FeatureMerged": (
        "shep.feature.merged",
        {"vcs.ref.base.name": "into", "vcs.ref.head.revision": "commit"},
    ),
}


def span_event(
    name: str, event: Mapping[str, Any], at: int, position: int
) -> dict[str, Any] | None:
    """The run span's event for run event ``name``, or None if it is not shown."""
    found = SPAN_EVENTS.get(name)
    if found is None:
        return None
    label, fields = found
    values: dict[str, object] = {key: event.get(field) for key, field in fields.items()}
    values["shep.log.position"] = position
    return {"timeUnixNano": str(at), "name": label, "attributes": attributes(values)}


def resource() -> dict[str, Any]:
    return {"attributes": attributes({"service.name": "shep", "service.version": __version__})}


def scope() -> dict[str, Any]:
    return {"name": SCOPE_NAME, "version": __version__}
