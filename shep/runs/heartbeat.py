"""The worker's heartbeat: a thread that records it is alive, and keeps projections current.

Every ``heartbeat_interval`` seconds it records ``HeartbeatRecorded`` (pid,
host, current node, last activity, tokens so far), fenced with the worker's
epoch, then catches the projections up, so a reader such as ``shep status``
finds them current instead of paying for a long run's output. When the run
is no longer the worker's (cancelled, or taken over while it was stopped),
it calls ``on_lost`` and stops; so it does when a shared store stayed away
past the worker's window (``EventStore.retry_for``), and when the SQLite file at
the store's path is no longer the one the worker opened (the home was deleted,
or a new store or a restored copy put there): then the store is given up, so
that every later call of the worker fails with one line saying so, and nothing
more is written into either file.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self
from uuid import UUID

from commands.record_heartbeat import record_heartbeat
from events.errors import (
    ConcurrencyError,
    InvalidTransitionError,
    ShepError,
    StoreUnavailableError,
    WorkerFencedError,
)
from events.store import EventStore
from projections.catch_up import catch_up
from projections.database import open_database
from shep.nodes.context import Live


class Heartbeat:
    """A running heartbeat thread; use as a context manager around the graph."""

    def __init__(
        self,
        store: EventStore,
        db_path: Path,
        run_id: UUID,
        *,
        pid: int,
        host: str,
        epoch: int,
        interval: float,
        live: Live,
        on_lost: Callable[[], None],
    ) -> None:
        self.store = store
        self.db_path = db_path
        self.run_id = run_id
        self.pid, self.host, self.epoch = pid, host, epoch
        self.interval = interval
        self.live = live
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="shep-heartbeat")

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        projections = None
        with contextlib.suppress(ShepError):  # beats go on; the check below says why not
            projections = open_database(self.db_path)
        try:
            while not self._stop.wait(self.interval):
                if not self._beat():
                    return
                if projections is not None:
                    with contextlib.suppress(ShepError):
                        catch_up(projections)
        finally:
            if projections is not None:
                if not self.store.given_up:
                    with contextlib.suppress(ShepError):
                        catch_up(projections)
                projections.close()

    def _store_moved(self) -> bool:
        """Whether the store's file was deleted or replaced; if so, give the store up."""
        moved = self.store.file_moved()
        if moved is None:
            return False
        short = self.run_id.hex[:8]
        if moved == "deleted":
            message = (
                f"The event store {self.store.path} was deleted while run {short} ran: this "
                "worker stopped its agent and recorded nothing more."
            )
        else:
            message = (
                f"The event store {self.store.path} was replaced by another file while run "
                f"{short} ran: this worker stopped its agent and recorded nothing more, in "
                f"either file. If it is a restored copy, `shep resume {short}` goes on from "
                "what it holds."
            )
        self.store.give_up(StoreUnavailableError(message))
        return True

    def _beat(self) -> bool:
        """Record one heartbeat; False once the run is no longer ours (or its store gone)."""
        if self._store_moved():
            self.on_lost()
            return False
        with self.live.lock:
            node, activity, tokens = self.live.node, self.live.activity, self.live.tokens
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
                return True
            except ConcurrencyError:
                continue
            except (InvalidTransitionError, WorkerFencedError):
                self.on_lost()
                return False
            except StoreUnavailableError:
                if self.store.given_up:
                    # The shared store stayed away past the orphan window: other hosts
                    # take the run for interrupted now, so its agent must not go on.
                    self.on_lost()
                    return False
                return True
            except ShepError:
                return True
        return True
