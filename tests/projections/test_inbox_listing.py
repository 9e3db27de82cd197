"""The inbox's pending list: one indexed read of the inbox, its items holding their run's
workflow and repository (issue 22: `shep inbox` read the runs table for every item)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import msgspec

from commands.suspend_run import Ask
from events.base import utc_now
from events.inbox import ApprovalVoted, ArtifactRef, QuestionOption
from events.store import EventStore
from events.supervisor import SupervisorDecisionMade, supervisor_stream_id
from projections.catch_up import catch_up, rebuild
from projections.database import open_database
from projections.inbox_queries import get_item, list_inbox, list_inbox_items
from projections.tables import VERSIONS_TABLE
from tests.support.cli import shep
from tests.support.store_items import ask_on_new_run, gate, question


def _runs_on_repos(store: EventStore, conn: apsw.Connection, tmp_path: Path) -> None:
    """Runs on three repositories, waiting on questions and gates; some folded before
    their items are asked (in another catch-up), some in the same one."""
    for n in range(6):
        asks = [question(f"q{n}"), gate(f"g{n}")]
        ask_on_new_run(store, tmp_path / f"repo-{n % 3}", asks, resumed=False)
        if n % 2:
            catch_up(conn)
    catch_up(conn)


def _planned(conn: apsw.Connection, call: Any) -> list[str]:
    """The query plan of each statement ``call`` runs on ``conn``."""
    statements: list[tuple[str, Any]] = []

    def trace(cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
        statements.append((sql, bindings))
        return True

    conn.exec_trace = trace
    try:
        call()
    finally:
        conn.exec_trace = None
    return [
        str(row[3])
        for sql, bindings in statements
        for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", bindings)
    ]


#: The plan of the pending list: the inbox's index, read in the list's order.
_ONE_READ = "SEARCH i USING INDEX inbox_status (status=?)"


def test_the_pending_list_is_one_indexed_read_of_the_inbox(
    store: EventStore, db_path: Path, tmp_path: Path
) -> None:
    """Listing the pending items reads the inbox's index in the list's order: no join with
    the runs table, no sort of the items afterwards."""
    conn = open_database(db_path)
    _runs_on_repos(store, conn, tmp_path)
    plan = _planned(conn, lambda: list_inbox(conn))
    assert plan == [_ONE_READ], plan
    plan = _planned(conn, lambda: list_inbox_items(conn))  # what `shep inbox --json` reads
    assert plan == [_ONE_READ], plan
    conn.close()


def test_items_hold_their_runs_workflow_and_repository(
    store: EventStore, db_path: Path, tmp_path: Path
) -> None:
    """Each item, listed, got one by id, or filtered by repository, says its run's workflow
    and repository as the runs projection has them; a rebuild from the log gives the same."""
    conn = open_database(db_path)
    _runs_on_repos(store, conn, tmp_path)
    runs = {
        str(run_id): (str(workflow), str(repo))
        for run_id, workflow, repo in conn.execute("SELECT run_id, workflow, repo FROM runs")
    }
    items = list_inbox(conn)
    assert len(items) == 12
    assert {(i["workflow"], i["repo"]) for i in items} == set(runs.values())
    for item in items:
        assert (item["workflow"], item["repo"]) == runs[item["run_id"]]
        assert get_item(conn, item["item_id"]) == item
    repo = str(tmp_path / "repo-1")
    assert list_inbox(conn, repo=repo) == [i for i in items if i["repo"] == repo]
    rebuild(conn)
    assert list_inbox(conn) == items
    conn.close()


def test_an_inbox_built_by_the_previous_version_is_rebuilt_with_the_runs_places(
    store: EventStore, db_path: Path, tmp_path: Path
) -> None:
    """A store whose inbox was built by version 3 (no workflow or repository on its items,
    no table of runs' places, the index without the items' ids) is rebuilt on open and
    lists the same items as before."""
    conn = open_database(db_path)
    _runs_on_repos(store, conn, tmp_path)
    expected = list_inbox(conn)
    conn.execute("DROP TABLE inbox_runs")
    conn.execute("DROP INDEX inbox_status")
    conn.execute("ALTER TABLE inbox DROP COLUMN workflow")
    conn.execute("ALTER TABLE inbox DROP COLUMN repo")
    conn.execute("CREATE INDEX inbox_status ON inbox (status, asked_at)")
    conn.execute(f"UPDATE {VERSIONS_TABLE} SET version = 3 WHERE name = 'inbox'")
    conn.close()
    conn = open_database(db_path)
    assert list_inbox(conn) == expected
    assert _planned(conn, lambda: list_inbox(conn)) == [_ONE_READ]
    conn.close()


#: Text as agents and people write it: quotes, escapes, control characters, any script.
_TRICKY = 'caf\u00e9 "q" \\ </b>\n\t\x01\x7f \u2028 \U0001f600 \u65e5\u672c'


def test_inbox_json_says_the_same_fields_in_the_same_order(
    store: EventStore, db_path: Path, tmp_path: Path
) -> None:
    """`shep inbox --json` prints each pending item with the fields it printed before the
    listing was made straight from the inbox's rows, in that order, byte for byte as the
    dicts of every column cut to those fields printed them: with a supervisor's note, a
    vote, and text of every kind in the prompt, the options, the artifacts and the note."""
    tricky_question = Ask(
        interrupt_id="q",
        kind="question",
        node="scope",
        question=_TRICKY,
        context=_TRICKY,
        options=[QuestionOption(id="x", label=_TRICKY, description=_TRICKY, recommended=True)],
    )
    tricky_gate = Ask(
        interrupt_id="g",
        kind="approval",
        node="approve",
        summary=_TRICKY,
        phase="draft",
        artifacts=[ArtifactRef(path=_TRICKY, sha256="0" * 64)],
    )
    repo = tmp_path / _TRICKY.replace("/", "_")
    run, (asked, gated, _) = ask_on_new_run(
        store, repo, [tricky_question, tricky_gate, question("plain")], resumed=False
    )
    now = utc_now()
    store.append(
        [
            SupervisorDecisionMade(
                originator_id=supervisor_stream_id(run),
                originator_version=1,
                timestamp=now,
                run_id=run,
                subject_id=gated,
                decision="approve",
                rationale=_TRICKY,
                policy="cosign",
                policy_version="1",
                prompt_version="sup-1",
                evaluator_agent="demo",
                cosign_pending=True,
            ),
            ApprovalVoted(originator_id=gated, originator_version=2, timestamp=now, actor=_TRICKY),
        ]
    )
    printed = shep("inbox", "--json", check=True).stdout
    fields = (
        "item_id", "kind", "run_id", "workflow", "repo", "node", "iteration", "prompt",
        "context", "options", "free_text", "phase", "artifacts", "deadline", "asked_at",
        "supervisor", "votes",
    )  # fmt: skip
    conn = open_database(db_path)
    items = list_inbox(conn)
    conn.close()
    as_before = [{key: item[key] for key in fields} for item in items]
    assert printed == msgspec.json.format(msgspec.json.encode(as_before), indent=2).decode() + "\n"
    listed = json.loads(printed, object_pairs_hook=list)
    assert [tuple(key for key, _ in item) for item in listed] == [fields] * 3
    by_id = {item["item_id"]: item for item in json.loads(printed)}
    assert by_id[asked.hex]["prompt"] == _TRICKY
    assert by_id[asked.hex]["options"][0]["label"] == _TRICKY
    assert by_id[gated.hex]["artifacts"][0]["path"] == _TRICKY
    assert by_id[gated.hex]["supervisor"]["rationale"] == _TRICKY
    assert by_id[gated.hex]["votes"] == [_TRICKY]
    assert {item["repo"] for item in by_id.values()} == {str(repo)}
    assert {item["run_id"] for item in by_id.values()} == {run.hex}
