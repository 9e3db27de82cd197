"""`shep audit export` with the supervisor: its decisions beside the users', in log order.

One run waits on a question and four gates, and the real commands decide them
(``record_verdict`` as the supervisor records, ``approve_item``, ``reject_item``
and ``answer_question`` as ``shep approve|reject|answer`` do):

- g1: the supervisor approves (autonomous), then bob overrides it with a rejection;
- g2: alice votes under a cosign policy, then the supervisor co-signs the approval;
- g4: the supervisor co-signs first (cosign pending), then dave approves;
- q1: carol answers, then the supervisor's answer is refused (she decided first);
- g3: the supervisor only advises (advisory): nobody decided it yet.

A second run has one gate approved by a user alone. Every export goes through
the real CLI, and every JSONL export verifies with ``shep audit verify --export``.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import apsw
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from commands.answer_question import answer_question
from commands.approve_item import approve_item
from commands.reject_item import reject_item
from commands.supervise import Verdict, record_verdict
from events.chain import GENESIS_HASH, chain_hash
from events.store import EventStore
from events.supervisor import RuleResult, supervisor_stream_id
from projections.catch_up import catch_up, rebuild
from projections.database import open_database
from shep.audit.export import CSV_COLUMNS, canonical
from shep.audit.verify_export import verify_export
from tests.support.cli import shep
from tests.support.store_items import ask_on_new_run, gate, question

POLICY = "global@1"
SUPERVISOR = f"supervisor:{POLICY}"
PROMPT = "supervisor-v3"
RULES = (RuleResult(rule="max_diff_lines", passed=True, detail="12 <= 400"),)
MISSING_RULE = (RuleResult(rule="tests_must_pass", passed=None, detail="no test result"),)


def seen(item: UUID) -> str:
    """The input hash the supervisor records for ``item`` (what it decided on)."""
    return hashlib.sha256(f"what the supervisor read about {item.hex}".encode()).hexdigest()


@dataclass
class Supervised:
    """The items of the supervised run (see the module doc) and of the plain one."""

    run: UUID
    q1: UUID
    g1: UUID
    g2: UUID
    g3: UUID
    g4: UUID
    plain_run: UUID
    plain_gate: UUID


def verdict(run: UUID, item: UUID, autonomy: str, decided: str, **fields: Any) -> Verdict:
    given: dict[str, Any] = {
        "item_id": item,
        "run_id": run,
        "kind": "plan",
        "autonomy": autonomy,
        "verdict": decided,
        "rationale": f"{decided}: the plan is small",
        "policy_scope": "global",
        "policy_version": POLICY,
        "prompt_version": PROMPT,
        "evaluator": "claude-code",
        "model": "claude-test-1",
        "input_hash": seen(item),
        "confidence": 0.875,
    }
    return Verdict(**{**given, **fields})


def supervise_some(store: EventStore, repo: Path) -> Supervised:
    run, (q1, g1, g2, g3, g4) = ask_on_new_run(
        store,
        repo,
        [question("q1"), gate("g1"), gate("g2"), gate("g3"), gate("g4")],
        resumed=False,
    )
    record_verdict(store, verdict(run, g1, "autonomous", "approve", rules=RULES), position=1)
    reject_item(store, g1, actor="user:bob", reason="not before the migration is written")
    approve_item(store, g2, actor="user:alice", comment="fine by me", cosign=POLICY)
    record_verdict(store, verdict(run, g2, "cosign", "approve"), position=2)
    record_verdict(store, verdict(run, g4, "cosign", "approve"), position=3)
    approve_item(store, g4, actor="user:dave", cosign=POLICY)
    answer_question(store, q1, actor="user:carol", option_id="small")
    answer = verdict(
        run, q1, "autonomous", "answer", kind="question", answer="Large", option_id="large"
    )
    record_verdict(store, answer, position=4)
    advice = verdict(run, g3, "advisory", "advise", advice="reject", rules=MISSING_RULE)
    record_verdict(store, advice, position=5)
    plain_run, (plain_gate,) = ask_on_new_run(store, repo, [gate("p1")], resumed=False)
    approve_item(store, plain_gate, actor="user:erin", comment="ship it")
    return Supervised(run, q1, g1, g2, g3, g4, plain_run, plain_gate)


@pytest.fixture
def supervised(store: EventStore, tmp_path: Path) -> Supervised:
    return supervise_some(store, tmp_path)


def export_file(tmp_path: Path, *options: str, name: str = "export.jsonl") -> Path:
    target = tmp_path / name
    done = shep("audit", "export", *options, "--output", str(target))
    assert done.returncode == 0, done.stderr
    return target


def event_lines(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_bytes().splitlines()]
    assert lines[0]["type"] == "export-start"
    assert lines[-1]["type"] == "export-end"
    return lines[1:-1]


def verified(path: Path) -> str:
    """``shep audit verify --export`` on ``path``: its one line, which says OK."""
    done = shep("audit", "verify", "--export", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OK: "), done.stdout
    return done.stdout


def decisions_of(lines: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(item, actor, verdict) of each decision line, in file order."""
    return [(e["item"][:8], e["actor"], e["verdict"]) for e in lines if "verdict" in e]


def stored_chain(db_path: Path) -> dict[int, bytes]:
    conn = apsw.Connection(str(db_path))
    try:
        return {
            int(position): bytes(hashed)
            for position, hashed in conn.execute(
                "SELECT notification_id, chain_hash FROM stored_events"
            )
        }
    finally:
        conn.close()


def test_supervisor_and_user_decisions_side_by_side_in_log_order(
    supervised: Supervised, db_path: Path, tmp_path: Path
) -> None:
    """``--kind decisions``: every supervisor decision, refusal and vote between the users'
    decisions, in log order, each with who decided, the verdict, why and under what."""
    path = export_file(tmp_path, "--kind", "decisions")
    lines = event_lines(path)
    positions = [e["position"] for e in lines]
    assert positions == sorted(positions)
    s = supervised
    g1, g2, g3, g4, q1 = (i.hex[:8] for i in (s.g1, s.g2, s.g3, s.g4, s.q1))
    assert decisions_of(lines) == [
        # The supervisor's approval of g1 commits with its decision record.
        (g1, SUPERVISOR, "approved"),
        (g1, SUPERVISOR, "approve"),
        (g1, "user:bob", "rejected"),
        (g2, "user:alice", "vote"),
        (g2, SUPERVISOR, "approved"),
        (g2, SUPERVISOR, "approve"),
        (g4, SUPERVISOR, "approve"),
        (g4, "user:dave", "approved"),
        (q1, "user:carol", "answered"),
        (q1, SUPERVISOR, "refused"),
        (g3, SUPERVISOR, "advise"),
        (s.plain_gate.hex[:8], "user:erin", "approved"),
    ]
    # Each item's question or gate comes first, g3 too: only the supervisor advised on it.
    asks = [e["item"] for e in lines if e["topic"].endswith(("QuestionAsked", "ApprovalRequested"))]
    assert sorted(asks) == sorted(i.hex for i in (s.q1, s.g1, s.g2, s.g3, s.g4, s.plain_gate))


def test_a_supervisor_decision_line_says_what_it_decided_on(
    supervised: Supervised, tmp_path: Path
) -> None:
    """actor and policy are the policy version, seen_hash is the input it decided on (not
    what the inbox shows a person), and the event holds the model, confidence, rules, acted.
    """
    lines = event_lines(export_file(tmp_path, "--kind", "decisions"))
    made = [e for e in lines if e["topic"] == "events.supervisor:SupervisorDecisionMade"]
    g1 = next(e for e in made if e["item"] == supervised.g1.hex)
    assert g1["stream"] == supervisor_stream_id(supervised.run).hex
    assert {k: g1[k] for k in ("actor", "verdict", "reason", "policy", "prompt_version")} == {
        "actor": SUPERVISOR,
        "verdict": "approve",
        "reason": "approve: the plan is small",
        "policy": POLICY,
        "prompt_version": PROMPT,
    }
    assert (g1["run"], g1["node"], g1["seen_hash"]) == (
        supervised.run.hex,
        "approve",
        seen(supervised.g1),
    )
    the_gate = next(e for e in lines if e["item"] == supervised.g1.hex and "verdict" not in e)
    assert the_gate["seen_hash"] != g1["seen_hash"]
    event = g1["event"]
    assert (event["model"], event["confidence"], event["acted"]) == ("claude-test-1", 0.875, True)
    assert event["rules"] == [{"rule": "max_diff_lines", "passed": True, "detail": "12 <= 400"}]
    assert event["policy"] == "global"  # the scope; the line's policy is the version
    advised = next(e for e in made if e["item"] == supervised.g3.hex)
    assert (advised["verdict"], advised["event"]["acted"], advised["event"]["advice"]) == (
        "advise",
        False,
        "reject",
    )
    pending = next(e for e in made if e["item"] == supervised.g4.hex)
    assert (pending["event"]["acted"], pending["event"]["cosign_pending"]) == (False, True)


def test_refusals_votes_overrides_and_cosignatures(supervised: Supervised, tmp_path: Path) -> None:
    """A refused decision names who decided first; a vote is a vote; a user's decision
    says whose it replaced, an approval who co-signed it. Item decisions keep their shape."""
    lines = event_lines(export_file(tmp_path, "--kind", "decisions"))
    by = {(e["item"], e["actor"], e["verdict"]): e for e in lines if "verdict" in e}
    s = supervised
    refused = by[(s.q1.hex, SUPERVISOR, "refused")]
    assert refused["topic"] == "events.supervisor:SupervisorDecisionRefused"
    assert (refused["reason"], refused["policy"], refused["node"]) == (
        "the item was decided first",
        POLICY,
        "scope",
    )
    assert (refused["event"]["decided_by"], refused["event"]["decision"]) == (
        "user:carol",
        "answer",
    )
    assert "seen_hash" not in refused
    assert "prompt_version" not in refused
    vote = by[(s.g2.hex, "user:alice", "vote")]
    assert (vote["topic"], vote["reason"], vote["policy"]) == (
        "events.inbox:ApprovalVoted",
        "fine by me",
        POLICY,
    )
    gate_seen = vote["seen_hash"]
    overridden = by[(s.g1.hex, "user:bob", "rejected")]
    assert overridden["event"]["overrides"] == SUPERVISOR
    assert overridden["seen_hash"] == gate_seen  # the same gate as shown to a person
    assert by[(s.g2.hex, SUPERVISOR, "approved")]["event"]["cosigned_by"] == "user:alice"
    assert by[(s.g4.hex, "user:dave", "approved")]["event"]["cosigned_by"] == SUPERVISOR
    item_keys = {"actor", "item", "run", "node", "verdict", "reason", "seen_hash", "policy"}
    plain = by[(s.plain_gate.hex, "user:erin", "approved")]
    assert item_keys - {"policy"} <= set(plain)
    assert "policy" not in plain
    assert (plain["event"]["overrides"], plain["event"]["cosigned_by"]) == (None, None)


@pytest.mark.parametrize("kind", ["decisions", "approvals", "all"])
def test_exports_with_supervisor_decisions_verify_and_chain(
    supervised: Supervised, db_path: Path, tmp_path: Path, kind: str
) -> None:
    """``shep audit verify --export`` passes; every line's chain hash is the stored one and
    recomputes from its ``prev_hash``, the stored hash of the position before it."""
    path = export_file(tmp_path, "--kind", kind)
    lines = event_lines(path)
    assert verified(path).startswith(f"OK: {len(lines)} events verify.")
    stored = stored_chain(db_path)
    for e in lines:
        position = e["position"]
        before = stored.get(position - 1, GENESIS_HASH)
        assert e["prev_hash"] == before.hex()
        assert e["chain_hash"] == stored[position].hex()
        state = base64.b64decode(e["state"], validate=True)
        assert chain_hash(
            before, position, e["stream"].encode(), e["version"], e["topic"].encode(), state
        ) == bytes.fromhex(e["chain_hash"])
        assert json.loads(state) == e["event"]
    end = json.loads(path.read_bytes().splitlines()[-1])
    assert (end["count"], end["first_position"], end["last_position"]) == (
        len(lines),
        lines[0]["position"],
        lines[-1]["position"],
    )
    if kind == "all":
        assert [e["position"] for e in lines] == sorted(stored)


def test_approvals_keep_the_supervisor_on_gates_only(
    supervised: Supervised, tmp_path: Path
) -> None:
    """``--kind approvals``: gates, and every decision on them (the supervisor's and votes
    included); the question and the supervisor's refused answer to it are left out."""
    lines = event_lines(export_file(tmp_path, "--kind", "approvals"))
    items = {e["item"] for e in lines}
    assert supervised.q1.hex not in items
    assert {supervised.g1.hex, supervised.g3.hex, supervised.g4.hex} <= items
    assert ("events.inbox:ApprovalVoted", "vote") in {(e["topic"], e.get("verdict")) for e in lines}
    made = [e for e in lines if e["topic"] == "events.supervisor:SupervisorDecisionMade"]
    assert len(made) == 4
    assert not any(e["topic"].endswith("SupervisorDecisionRefused") for e in lines)


def test_one_run_has_its_supervisor_decisions_only(supervised: Supervised, tmp_path: Path) -> None:
    """``--run``: the run's supervisor stream is part of it; another run's decisions are not."""
    path = export_file(tmp_path, "--kind", "decisions", "--run", supervised.run.hex[:8])
    lines = event_lines(path)
    verified(path)
    assert {e["run"] for e in lines} == {supervised.run.hex}
    assert sum(e.get("actor") == SUPERVISOR for e in lines) == 7
    other = event_lines(
        export_file(tmp_path, "--kind", "decisions", "--run", supervised.plain_run.hex, name="o")
    )
    assert decisions_of(other) == [(supervised.plain_gate.hex[:8], "user:erin", "approved")]


def test_a_changed_supervisor_field_does_not_verify(supervised: Supervised, tmp_path: Path) -> None:
    """The supervisor's audit fields are recomputed from its event: a line claiming another
    actor, or that it saw what the person saw, fails at that line."""
    path = export_file(tmp_path, "--kind", "decisions")
    raw = path.read_bytes().splitlines(keepends=True)
    at = next(
        i
        for i, line in enumerate(raw)
        if b"SupervisorDecisionMade" in line and supervised.g1.hex.encode() in line
    )
    gate_seen = next(e for e in event_lines(path) if e.get("verdict") == "vote")["seen_hash"]
    for key, value in (("actor", "user:bob"), ("seen_hash", gate_seen), ("node", 7)):
        line = json.loads(raw[at])
        line[key] = value
        changed = tmp_path / f"changed-{key}.jsonl"
        changed.write_bytes(b"".join([*raw[:at], canonical(line) + b"\n", *raw[at + 1 :]]))
        report = verify_export(changed)
        assert not report.ok
        assert (report.line, report.position) == (at + 1, line["position"])
        assert key in report.problem


def test_csv_gives_the_supervisor_evidence_columns(supervised: Supervised, tmp_path: Path) -> None:
    """The CSV header is ``CSV_COLUMNS``; the supervisor's model, confidence, rules and
    whether it acted, a refusal's decided_by, overrides and cosigned_by have columns."""
    done = shep("audit", "export", "--kind", "decisions", "--format", "csv", check=True)
    table = list(csv.reader(io.StringIO(done.stdout, newline="")))
    assert tuple(table[0]) == CSV_COLUMNS
    rows = [dict(zip(CSV_COLUMNS, row, strict=True)) for row in table[1:]]
    by = {(r["item"], r["actor"], r["verdict"]): r for r in rows if r["verdict"]}
    s = supervised
    made = by[(s.g1.hex, SUPERVISOR, "approve")]
    assert {k: made[k] for k in ("policy", "prompt_version", "seen_hash", "node", "run")} == {
        "policy": POLICY,
        "prompt_version": PROMPT,
        "seen_hash": seen(s.g1),
        "node": "approve",
        "run": s.run.hex,
    }
    assert (made["model"], made["confidence"], made["acted"]) == ("claude-test-1", "0.875", "true")
    assert json.loads(made["rules"]) == [
        {"rule": "max_diff_lines", "passed": True, "detail": "12 <= 400"}
    ]
    advised = by[(s.g3.hex, SUPERVISOR, "advise")]
    assert (advised["acted"], advised["advice"]) == ("false", "reject")
    assert json.loads(advised["rules"])[0]["passed"] is None
    assert by[(s.q1.hex, SUPERVISOR, "refused")]["decided_by"] == "user:carol"
    assert by[(s.g1.hex, "user:bob", "rejected")]["overrides"] == SUPERVISOR
    assert by[(s.g2.hex, SUPERVISOR, "approved")]["cosigned_by"] == "user:alice"
    plain = by[(s.plain_gate.hex, "user:erin", "approved")]
    assert all(plain[k] == "" for k in ("model", "confidence", "rules", "acted", "overrides"))
    asks = [r for r in rows if not r["verdict"]]
    assert asks
    assert all(r["acted"] == r["model"] == "" for r in asks)


def test_otlp_has_a_log_record_per_decision_with_the_evidence(
    supervised: Supervised, tmp_path: Path
) -> None:
    """Every decision, the supervisor's included, is a log record in the run's trace, in
    log order, with the same fields as the JSONL line and the supervisor's evidence."""
    done = shep("audit", "export", "--kind", "decisions", "--format", "otlp-json", check=True)
    records: list[dict[str, Any]] = []
    for raw in done.stdout.splitlines():
        request = json.loads(raw)
        assert set(request) == {"resourceLogs"}
        for_proto = json.loads(raw)
        for resource in for_proto["resourceLogs"]:
            for scope in resource["scopeLogs"]:
                for record in scope["logRecords"]:
                    for key in ("traceId", "spanId"):
                        if key in record:
                            record[key] = base64.b64encode(bytes.fromhex(record[key])).decode()
        json_format.Parse(json.dumps(for_proto), ExportLogsServiceRequest())
        for resource in request["resourceLogs"]:
            for scope in resource["scopeLogs"]:
                records += scope["logRecords"]

    def values(record: dict[str, Any]) -> dict[str, Any]:
        return {a["key"]: next(iter(a["value"].values())) for a in record["attributes"]}

    jsonl = event_lines(export_file(tmp_path, "--kind", "decisions"))
    decided = [e for e in jsonl if "verdict" in e]
    keys = ("shep.item.id", "shep.decision.actor", "shep.decision.verdict", "shep.log.position")
    assert [tuple(values(r)[k] for k in keys) for r in records] == [
        (e["item"], e["actor"], e["verdict"], str(e["position"])) for e in decided
    ]
    s = supervised
    made = next(
        r
        for r in records
        if values(r)["shep.item.id"] == s.g1.hex and values(r)["shep.decision.verdict"] == "approve"
    )
    attributes = values(made)
    assert made["traceId"] == s.run.hex
    assert made["body"]["stringValue"] == f"approve by {SUPERVISOR}: approve: the plan is small"
    assert {
        k: attributes[f"shep.decision.{k}"]
        for k in ("policy", "prompt_version", "seen_hash", "model", "confidence", "acted")
    } == {
        "policy": POLICY,
        "prompt_version": PROMPT,
        "seen_hash": seen(s.g1),
        "model": "claude-test-1",
        "confidence": 0.875,
        "acted": True,
    }
    assert json.loads(attributes["shep.decision.rules"])[0]["rule"] == "max_diff_lines"
    by_verdict = {
        (values(r)["shep.item.id"], values(r)["shep.decision.verdict"]): values(r) for r in records
    }
    assert by_verdict[(s.q1.hex, "refused")]["shep.decision.decided_by"] == "user:carol"
    assert by_verdict[(s.g1.hex, "rejected")]["shep.decision.overrides"] == SUPERVISOR
    assert by_verdict[(s.g2.hex, "vote")]["shep.decision.actor"] == "user:alice"
    # Decisions after a vote or the supervisor's still point at the node span that asked.
    spans = {r.get("spanId") for r in records if values(r)["shep.item.id"] == s.g2.hex}
    assert len(spans) == 1
    assert None not in spans


def test_the_decisions_projection_has_them_side_by_side(
    supervised: Supervised, db_path: Path
) -> None:
    """The decisions table: the supervisor's rows (actor ``supervisor:<policy version>``),
    its refusal and the vote beside the users' rows; a rebuild gives the same rows."""
    conn = open_database(db_path)
    catch_up(conn, batch_size=3)
    cursor = conn.execute(
        "SELECT * FROM decisions WHERE run_id=? ORDER BY position", (supervised.run.hex,)
    )
    columns = [c[0] for c in cursor.getdescription()]
    said = ("position", "run_id", "node", "prompt_version", "rationale", "timestamp", "chain_hash")
    rows = [
        {k: v for k, v in zip(columns, r, strict=True) if v is not None and k not in said}
        for r in cursor
    ]
    s = supervised

    def row(item: UUID, kind: str, decision: str, actor: str, **more: object) -> dict[str, object]:
        return {"subject_id": item.hex, "kind": kind, "decision": decision, "actor": actor, **more}

    def evidence(item: UUID, acted: int) -> dict[str, object]:
        made = {"policy": "global", "policy_version": POLICY, "model": "claude-test-1"}
        return {**made, "confidence": 0.875, "input_hash": seen(item), "acted": acted}

    assert rows == [
        row(s.g1, "approval", "approved", SUPERVISOR, policy=POLICY, acted=1),
        row(s.g1, "supervisor", "approve", SUPERVISOR, **evidence(s.g1, 1)),
        row(s.g1, "approval", "rejected", "user:bob", overrides=SUPERVISOR, acted=1),
        row(s.g2, "vote", "approve", "user:alice", policy=POLICY, acted=0),
        row(s.g2, "approval", "approved", SUPERVISOR, policy=POLICY, cosigned_by="user:alice")
        | {"acted": 1},
        row(s.g2, "supervisor", "approve", SUPERVISOR, **evidence(s.g2, 1)),
        row(s.g4, "supervisor", "approve", SUPERVISOR, **evidence(s.g4, 0)),
        row(s.g4, "approval", "approved", "user:dave", policy=POLICY, cosigned_by=SUPERVISOR)
        | {"acted": 1},
        row(s.q1, "question", "Small: one module", "user:carol", acted=1),
        row(s.q1, "refused", "answer", SUPERVISOR, policy_version=POLICY, decided_by="user:carol")
        | {"acted": 0},
        row(s.g3, "supervisor", "advise", SUPERVISOR, **evidence(s.g3, 0)),
    ]
    everything = sorted(conn.execute("SELECT * FROM decisions").fetchall())
    rebuild(conn, batch_size=4)
    assert sorted(conn.execute("SELECT * FROM decisions").fetchall()) == everything
    conn.close()
