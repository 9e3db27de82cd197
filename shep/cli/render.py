"""Plain-text rendering shared by the read commands: ages, short ids, tables."""

from __future__ import annotations

import math
import sys
import time
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from events.words import counted

if TYPE_CHECKING:
    from projections.database import RebuildProgress

SHORT_ID = 8


def events_verify(count: int, between: str = "") -> str:
    """``1 event verifies``, ``2 events before it verify``: a chain report's count."""
    verb = "verifies" if count == 1 else "verify"
    return f"{counted(count, 'event')}{between} {verb}"


def short_id(run_id: str) -> str:
    return run_id[:SHORT_ID]


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def age(value: str | None, now: datetime | None = None) -> str:
    """'42s', '5m', '3h', '2d' since an ISO timestamp; '-' for none."""
    moment = parse_time(value)
    if moment is None:
        return "-"
    seconds = max(0, int(((now or datetime.now(UTC)) - moment).total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


# click >= 8.2 makes ParamType generic; the subscripted form fails on older clicks.
class Seconds(click.ParamType):  # type: ignore[type-arg]
    """A finite number of seconds within bounds (click's FloatRange lets ``nan`` and ``inf``
    through, since no comparison with them is true).
    """

    name = "seconds"

    def __init__(self, low: float, high: float | None = None) -> None:
        # Imported here: `shep status` imports this module but takes no durations.
        from events.setting_values import WEEK

        self.low, self.high = low, WEEK if high is None else high

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds.", param, ctx)
        if not math.isfinite(seconds) or not self.low <= seconds <= self.high:
            self.fail(
                f"{value!r} is not between {self.low:g} and {self.high:g} seconds.", param, ctx
            )
        return seconds


def printable(text: object) -> str:
    """Text from a workflow, an agent or another user, with control characters (escape
    codes that could rewrite someone's terminal) shown as ``?``; tabs become spaces.
    """
    return "".join(
        c if c == "\n" or unicodedata.category(c) != "Cc" else " " if c == "\t" else "?"
        for c in str(text)
    )


def rebuild_line(progress: RebuildProgress) -> str:
    """``Rebuilding logs: 120000 of 1030000 events (11%)``, and the like."""
    names = ", ".join(progress.projections)
    if progress.waiting:
        return f"Waiting for another shep process to finish rebuilding {names}..."
    why = " (changed in this version of shep)" if progress.reason == "changed" else ""
    if progress.finished:
        return f"Rebuilt {names}{why} from {counted(progress.done, 'event')}."
    share = f" ({100 * progress.done // progress.total}%)" if progress.total else ""
    return f"Rebuilding {names}{why}: {progress.done} of {progress.total} events{share}"


class ProgressLine:
    """Shows a rebuild's progress on stderr: in a terminal one line, redrawn; elsewhere a
    line every few seconds, and the last (unless ``finished=False``: the caller says it).
    """

    def __init__(self, *, every: float = 2.0, finished: bool = True) -> None:
        self.every = every
        self.finished = finished
        self.tty = sys.stderr.isatty()
        self._next = 0.0
        self._drawn = False

    def __call__(self, progress: RebuildProgress) -> None:
        if progress.finished and not self.finished:
            if self._drawn:
                click.echo("\r\x1b[K", nl=False, err=True)
            return
        line = rebuild_line(progress)
        if self.tty:
            last = progress.finished or progress.waiting
            click.echo(f"\r\x1b[K{line}", nl=last, err=True)
            self._drawn = not last
            return
        now = time.monotonic()
        if progress.finished or progress.waiting or now >= self._next:
            click.echo(line, err=True)
            self._next = now + self.every
