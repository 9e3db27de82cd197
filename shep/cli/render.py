"""Plain-text rendering shared by the read commands: ages, short ids, tables."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from events.words import counted

if TYPE_CHECKING:
    from projections.state import RebuildProgress


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


def wrapped(text: str, width: int, *, commands: Sequence[str] = ()) -> list[str]:
    """``text`` as lines of at most ``width`` columns, for a pane that would cut it.

    A line too long breaks at spaces, never inside a word (an id, a path, a sha: one
    longer than the line overflows, whole), and goes on indented two more than it
    began. A shell command of ``commands`` found in a line is never broken between its
    words at random: it starts a line of its own and breaks only before an option,
    with a `` \\`` at each break, so that what a person copies still runs.
    """
    width = max(width, 8)
    lines: list[str] = []
    for line in text.split("\n"):
        lines += _wrapped_line(line, width, commands)
    return lines


def _wrapped_line(line: str, width: int, commands: Sequence[str]) -> list[str]:
    import textwrap

    if len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip(" "))]
    for command in commands:
        at = line.find(command)
        if at < 0:
            continue
        head, tail = line[:at].rstrip(), line[at + len(command) :].strip()
        lines = _wrapped_line(head, width, ()) if head.strip() else []
        lines += command_lines(command, width, indent=indent + "  " if lines else indent)
        return lines + (_wrapped_line(indent + tail, width, ()) if tail else [])
    return textwrap.wrap(
        line,
        width,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    ) or [line]


def command_lines(command: str, width: int, *, indent: str = "") -> list[str]:
    """``command`` on as few lines of ``width`` as it takes, broken only before an option
    (``--at ID`` stays together), each broken line ending in `` \\``.
    """
    parts: list[str] = []
    for word in command.split(" "):
        if parts and not word.startswith("-"):
            parts[-1] += f" {word}"  # a value stays with its option, an argument with its verb
        else:
            parts.append(word)
    lines = [indent + parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 1 + len(part) + 2 <= width:
            lines[-1] += f" {part}"
        else:
            lines[-1] += " \\"
            lines.append(f"{indent}  {part}")
    return lines


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


def say_on_stderr(line: str) -> None:
    """Where the core's notices (``Runtime.say``) go in a terminal: one line on stderr."""
    click.echo(line, err=True)
