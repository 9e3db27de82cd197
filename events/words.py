"""How counts read in what shep prints: one rule, for every layer that prints one."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    """``1 event``, ``2 events``: a count with its noun, plural when it is not one."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def events_verify(count: int, between: str = "") -> str:
    """``1 event verifies``, ``2 events before it verify``: a chain report's count."""
    verb = "verifies" if count == 1 else "verify"
    return f"{counted(count, 'event')}{between} {verb}"
