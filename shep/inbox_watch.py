"""What every shep command does for the inbox before its own work.

- A pending question whose deadline has passed gets its recommended option,
  recorded with actor ``system:deadline`` (a gate never approves itself: gates
  have no deadline).
- A waiting run with a decided item it is suspended on has nobody resuming
  it (its decider died before starting the worker, or a deadline was just
  applied): a background worker is started for it.
- ``N waiting in the inbox: shep inbox`` is printed when items are pending
  (the ``inbox_notice`` setting turns it off).

Cheap when the inbox is empty: one indexed count.
"""

from __future__ import annotations

import contextlib
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from uuid import UUID

import apsw

from events.errors import StoreTooNewError

if TYPE_CHECKING:
    from shep.runtime import Runtime

DEADLINE_ACTOR = "system:deadline"


def watch_inbox(runtime: Runtime, conn: apsw.Connection, *, notice: bool = True) -> int:
    """Apply due deadlines, resume stranded runs, print the notice; return the pending count."""
    from projections.inbox_queries import count_pending

    pending = count_pending(conn)
    stranded = _awaited_decisions(conn)
    if pending == 0 and not stranded:
        return 0
    if not conn.readonly("main"):
        # A newer shep's store is read as it is: this shep writes none of it.
        with contextlib.suppress(StoreTooNewError):
            pending, stranded = _act(runtime, conn, pending, stranded)
    if pending and notice and notice_enabled(conn):
        print(f"{pending} waiting in the inbox: shep inbox", file=sys.stderr)
    return pending


def _act(runtime: Runtime, conn: apsw.Connection, pending: int, stranded: bool) -> tuple[int, bool]:
    """Apply due deadlines and resume stranded runs; the pending count and strandedness after."""
    from projections.inbox_queries import count_pending, list_expired_questions, list_runs_to_resume

    expired = list_expired_questions(conn, datetime.now(UTC).isoformat()) if pending else []
    for item in expired:
        _apply_deadline(runtime, item)
    if expired:
        from projections.runner import catch_up

        catch_up(conn)
        pending, stranded = count_pending(conn), _awaited_decisions(conn)
    if stranded:
        here = None
        if runtime.shared:
            from shep.identity import host_name

            here = host_name()
        for run_id in list_runs_to_resume(conn, host=here):
            _resume(runtime, run_id)
    return pending, stranded


def _awaited_decisions(conn: apsw.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM inbox WHERE awaited=1 AND status!='pending' LIMIT 1"
    ).fetchone()
    return row is not None


def _apply_deadline(runtime: Runtime, item: dict[str, object]) -> None:
    from commands.answer_question import answer_question
    from events.errors import AlreadyDecidedError, RunNotWaitingError

    options = item["options"]
    assert isinstance(options, list)
    recommended = next((o["id"] for o in options if o["recommended"]), None)
    if recommended is None:
        return
    with contextlib.suppress(AlreadyDecidedError, RunNotWaitingError):
        answer_question(
            runtime.store(),
            UUID(str(item["item_id"])),
            actor=DEADLINE_ACTOR,
            option_id=recommended,
        )
        print(
            f"Question {str(item['item_id'])[:8]} of run {str(item['run_id'])[:8]} passed its "
            f"deadline: answered with its recommended option {recommended!r}.",
            file=sys.stderr,
        )


def _resume(runtime: Runtime, run_hex: str) -> None:
    from events.errors import InvalidTransitionError
    from shep.cli.run import launch

    with contextlib.suppress(InvalidTransitionError):
        pid = launch(runtime, UUID(run_hex), resume=True, background=True, timeout=None, quiet=True)
        if pid is not None:
            runtime.resumed[run_hex] = pid


def notice_enabled(conn: apsw.Connection) -> bool:
    """The ``inbox_notice`` setting (on by default), read straight from the log.

    The settings fold's own rules apply: a recorded value that is not on or
    off is skipped, as `shep settings show` skips it.
    """
    from shep.settings import read_setting_values

    return read_setting_values(conn).flags["inbox_notice"]
