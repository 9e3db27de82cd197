"""What every shep command does for the inbox before its own work.

- A pending question whose deadline has passed gets its recommended option,
  recorded with actor ``system:deadline`` (a gate never approves itself: gates
  have no deadline).
- A waiting run with a decided item it is suspended on has nobody resuming
  it (its decider died before starting the worker, or a deadline was just
  applied): a background worker is started for it.
- ``N waiting in the inbox: shep inbox`` is said when items are pending, by the
  face once its command succeeded (``inbox_notice``; the setting of that name turns
  it off).

Cheap when the inbox is empty: one indexed count.

``wait_for_decision`` is the waiter a worker leaves on a run's own host when it
suspends the run on a shared store: a person may decide from another machine,
and the run goes on where its repository is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from uuid import UUID

import apsw

from events.errors import StoreTooNewError

if TYPE_CHECKING:
    from shep.home.runtime import Runtime

DEADLINE_ACTOR = "system:deadline"


def check_inbox(runtime: Runtime) -> int:
    """Apply due deadlines and resume runs whose decision nobody acted on (what every shep
    command does first); the pending count. One indexed count when the inbox is empty."""
    if not runtime.has_store():
        return 0
    return watch_inbox(runtime, runtime.read_db())


def watch_inbox(runtime: Runtime, conn: apsw.Connection) -> int:
    """Apply due deadlines and resume stranded runs; return the pending count."""
    from projections.inbox_queries import count_pending, has_awaited_decisions

    pending = count_pending(conn)
    stranded = has_awaited_decisions(conn)
    if pending == 0 and not stranded:
        return 0
    if not conn.readonly("main"):
        # A newer shep's store is read as it is: this shep writes none of it.
        with contextlib.suppress(StoreTooNewError):
            pending, stranded = _act(runtime, conn, pending, stranded)
    return pending


def inbox_notice(runtime: Runtime) -> str | None:
    """``N waiting in the inbox: shep inbox``, counted now (a command may have run for an
    hour), unless nothing waits or the ``inbox_notice`` setting turns it off."""
    from projections.inbox_queries import count_pending

    conn = runtime.read_db()
    pending = count_pending(conn)
    if not pending or not notice_enabled(conn):
        return None
    return f"{pending} waiting in the inbox: shep inbox"


def _act(runtime: Runtime, conn: apsw.Connection, pending: int, stranded: bool) -> tuple[int, bool]:
    """Apply due deadlines and resume stranded runs; the pending count and strandedness after."""
    from projections.inbox_queries import (
        count_pending,
        has_awaited_decisions,
        list_expired_questions,
        list_runs_to_resume,
    )

    expired = list_expired_questions(conn, datetime.now(UTC).isoformat()) if pending else []
    for item in expired:
        _apply_deadline(runtime, item)
    if expired:
        from projections.catch_up import catch_up

        catch_up(conn)
        pending, stranded = count_pending(conn), has_awaited_decisions(conn)
    if stranded:
        here = None
        if runtime.shared:
            from shep.home.identity import host_name

            here = host_name()
        for run_id in list_runs_to_resume(conn, host=here):
            _resume(runtime, run_id)
    return pending, stranded


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
        runtime.say(
            f"Question {str(item['item_id'])[:8]} of run {str(item['run_id'])[:8]} passed its "
            f"deadline: answered with its recommended option {recommended!r}."
        )


def _resume(runtime: Runtime, run_hex: str) -> None:
    from events.errors import InvalidTransitionError, WorkflowChangedError
    from shep.runs.pin import check_resume
    from shep.runs.workers import start_in_background

    run_id = UUID(run_hex)
    try:
        check_resume(runtime.store(), run_id, runtime.home)  # as ``shep.runs.launch.launch`` does
        started = start_in_background(runtime, run_id, resume=True, timeout=None)
    except InvalidTransitionError:
        return
    except WorkflowChangedError as e:
        # Decided, but its workflow changed: it waits, as it was, for one of the ways out.
        runtime.say(f"shep: {e}")
        return
    runtime.resumed[run_hex] = started.pid
    runtime.say(started.notice)


def notice_enabled(conn: apsw.Connection) -> bool:
    """The ``inbox_notice`` setting (on by default), read straight from the log.

    The settings fold's own rules apply: a recorded value that is not on or
    off is skipped, as `shep settings show` skips it.
    """
    from shep.home.settings import read_setting_values

    return read_setting_values(conn).flags["inbox_notice"]


def wait_for_decision(
    runtime: Runtime, run_hex: str, *, every: float, say: Callable[[str], None]
) -> int | None:
    """Poll the shared store every ``every`` seconds until run ``run_hex`` no longer waits
    here; resume it (``watch_inbox``) once decided. Returns the pid of the worker this
    waiter started, or None when the run was resumed elsewhere, ended, or left this host.

    A lost server is waited for as a worker waits for it (the same backoff; ``say``
    tells when it was lost and when it is back), for as long as it takes: the run
    waits for a person, and the waiter is the only one here to act on the decision.
    Its own writes (the resume) ride out a lost connection within the orphan window,
    as a worker's do.
    """
    import time

    from events.errors import StoreUnavailableError
    from events.store import RETRY_FIRST_DELAY, RETRY_LONGEST_DELAY

    lost_at: float | None = None
    delay = RETRY_FIRST_DELAY
    while True:
        try:
            waiting = _waits_here(runtime, run_hex, say)
        except StoreUnavailableError as e:
            if lost_at is None:
                lost_at = time.monotonic()
                say(f"lost the shared store ({e}); retrying")
            # A store that gave up (past its window) fails at once for good: start afresh.
            runtime.close()
            time.sleep(delay)
            delay = min(delay * 2, RETRY_LONGEST_DELAY)
            continue
        if lost_at is not None:
            say(f"the shared store is back after {time.monotonic() - lost_at:.1f}s")
            lost_at, delay = None, RETRY_FIRST_DELAY
        if run_hex in runtime.resumed:
            return runtime.resumed[run_hex]
        if not waiting:
            return None
        time.sleep(every)


def _waits_here(runtime: Runtime, run_hex: str, say: Callable[[str], None]) -> bool:
    """Bring this home's copy up to date (``StoreUnavailableError`` if the server is away)
    and resume the run if decided; whether it still waits.
    """
    from events.runs import WAITING_STATUSES
    from projections.catch_up import catch_up
    from projections.inbox_queries import has_awaited_decisions
    from projections.mirror import forget_offline, pull, url_of
    from projections.queries import get_run
    from shep.runs.recovery import orphan_after

    conn = runtime.read_db(catch_up=False)
    url = url_of(conn)
    if url is not None:
        forget_offline()
        pull(conn, url)
    catch_up(conn, pull=False)
    run = get_run(conn, run_hex)
    if run is None or run["status"] not in {status.value for status in WAITING_STATUSES}:
        return False
    if has_awaited_decisions(conn):
        # About to write (the resume): within the orphan window, a lost connection is
        # waited for and the write made once, as a worker does.
        store = runtime.store()
        if store.retry_for <= 0:
            store.retry_for = orphan_after(conn)
            store.on_retry = say
    check_inbox(runtime)
    return True
