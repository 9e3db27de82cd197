"""The root of shep's error hierarchy, and the errors the event store raises.

It lives here because ``events`` is the innermost layer: ``commands`` and
``shep`` extend it, and ``events`` imports nothing of ours.
"""

from __future__ import annotations


class ShepError(Exception):
    """A failure a user can see: the message says the problem and the fix."""

    exit_code: int = 1


class StoreError(ShepError):
    """The event store cannot be used."""


class StoreUnavailableError(StoreError):
    """The database cannot be opened or written (permissions, read-only home, disk full)."""


class StoreCorruptedError(StoreError):
    """The database file is not a shep event store or is damaged."""


class ConcurrencyError(ShepError):
    """Another writer appended to the same stream first; reload and decide again."""

    exit_code = 3
