"""The runs table of the runs page: its rows, each rendered once per state of its run, and
the workflows and repositories its filters offer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from markupsafe import Markup

from shep.web import core
from shep.web.app import WebState

Row = dict[str, Any]
T = TypeVar("T")


class Facets:
    """The workflows and repositories runs have: read once, again after a run is created."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.created = -1
        self.value: dict[str, list[str]] = {}

    def get(self, state: WebState, conn: Any) -> dict[str, list[str]]:
        with self.lock:
            if self.created != state.hub.runs_created:
                self.value = core.run_facets(conn)
                self.created = state.hub.runs_created
            return self.value


class Rows:
    """Each run's row of the runs table, rendered once per state of the run.

    A row changes only when its run does (its ``last_position``) or when what it
    waits for does; the ages in it change with the clock, so they are slots filled on
    every request. A long list (``shep status`` on a big home lists every interrupted
    run) is then served at about the cost of its query.
    """

    AGE, STALE, BEAT = "@@age@@", "@@stale@@", "@@beat@@"

    def __init__(self, size: int = 8192) -> None:
        self.lock = threading.Lock()
        self.size = size
        #: (run, position, waiting items) -> the row's HTML around its slots, and the
        #: moments (POSIX seconds) its ages count from.
        self.cached: dict[tuple[Any, ...], tuple[list[str], float, float | None]] = {}

    def _entry(self, state: WebState, run: Row) -> tuple[list[str], float, float | None]:
        html = state.templates.get_template("_run_row.html").render(
            r=run, age_slot=self.AGE, beat_slot=self.BEAT, stale_slot=self.STALE
        )
        head, _, rest = html.partition(self.AGE)
        created = datetime.fromisoformat(run["created_at"]).timestamp()
        if self.BEAT not in rest:
            return [head, rest], created, None
        middle, _, rest = rest.partition(self.STALE)
        between, _, tail = rest.partition(self.BEAT)
        beat = datetime.fromisoformat(run["last_heartbeat"]).timestamp()
        return [head, middle, between, tail], created, beat

    def render(self, state: WebState, runs: list[Row], stale_after: float | None) -> Markup:
        """Every run's row, as one piece of HTML."""
        now = time.time()
        stale = f"{stale_after:g}" if stale_after is not None else ""
        keys = [
            (run["run_id"], run["last_position"], *[w["item_id"] for w in run["waiting"]])
            if run["waiting"]
            else (run["run_id"], run["last_position"])
            for run in runs
        ]
        cached = self.cached
        with self.lock:
            found = [cached.get(key) for key in keys]
        out: list[str] = []
        add = out.append
        for key, run, known in zip(keys, runs, found, strict=True):
            entry = known if known is not None else self._entry(state, run)
            if known is None:
                with self.lock:
                    if len(cached) >= self.size:
                        cached.clear()  # rows are cheap to make again; no bookkeeping
                    cached[key] = entry
            parts, created, beat = entry
            add(parts[0])
            add(_since(now - created))
            add(parts[1])
            if beat is not None:
                beat_text = _since(now - beat)
                if stale_after is not None and now - beat > stale_after:
                    beat_text += " (stale)"
                add(stale)
                add(parts[2])
                add(beat_text)
                add(parts[3])
        return Markup("".join(out))  # noqa: S704 (rendered by the autoescaping template)


def _since(elapsed: float) -> str:
    """'42s', '5m', '3h', '2d': an age in seconds as the page shows it (its script after)."""
    seconds = int(elapsed) if elapsed > 0 else 0
    if seconds >= 86400:
        return f"{seconds // 86400}d"
    if seconds >= 3600:
        return f"{seconds // 3600}h"
    if seconds >= 60:
        return f"{seconds // 60}m"
    return f"{seconds}s"


class Listings:
    """What the runs table listed, kept for the projections' positions it was read at.

    The read side changes only when a projection's position moves, so a listing read
    at the same positions is the same listing: when a run changes, every open runs page
    fetches its rows again at the same position, and the first one reads them for all
    (a reload while nothing moved reads nothing either). Only the latest positions'
    listings are kept, a few filters' worth.
    """

    def __init__(self, size: int = 16) -> None:
        self.lock = threading.Lock()
        self.size = size
        self.positions: tuple[int, ...] = ()
        self.kept: dict[tuple[Any, ...], Any] = {}

    def get(self, positions: tuple[int, ...], filters: tuple[Any, ...], read: Callable[[], T]) -> T:
        """The listing for ``filters`` at ``positions``: kept, or ``read()`` and kept."""
        with self.lock:
            if positions == self.positions and filters in self.kept:
                return self.kept[filters]  # type: ignore[no-any-return]
        value = read()
        with self.lock:
            if positions != self.positions:
                self.positions, self.kept = positions, {}
            if len(self.kept) >= self.size:
                self.kept.clear()
            self.kept[filters] = value
        return value
