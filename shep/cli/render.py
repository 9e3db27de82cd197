"""Plain-text rendering shared by the read commands: ages, short ids, tables."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

SHORT_ID = 8


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
