"""What a ``SettingChanged`` may record: the plain settings, their defaults, bounds and rules.

Said once, here, for every reader and writer of the settings stream: the
command that records a change checks it against these rules, and the readers
(the settings fold, and the orphan check every shep command runs, which must
stay cheap) skip a recorded value that breaks them. Older versions of shep
recorded any float (``nan``, ``inf``); skipping such a record, instead of
failing on it, keeps every command working, including the one that repairs
the setting. Pure Python: importing this costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from events.errors import ShepError


class InvalidSettingError(ShepError):
    """A setting's value is not a number of seconds, is out of bounds, or breaks a rule."""

    exit_code = 2


@dataclass(frozen=True)
class SecondsSetting:
    """A duration setting: its default, the inclusive bounds of its value, what it does."""

    default: float
    low: float
    high: float
    help: str


WEEK = 7 * 24 * 3600.0

#: The plain settings, all numbers of seconds. Sub-second heartbeats are for tests;
#: the upper bounds catch typos (and ``1e30``) that would overflow a timestamp.
SECONDS_SETTINGS: Mapping[str, SecondsSetting] = MappingProxyType(
    {
        "heartbeat_interval": SecondsSetting(
            30.0, 0.1, 3600.0, "seconds between worker heartbeats"
        ),
        "agent_timeout": SecondsSetting(
            1800.0, 1.0, WEEK, "seconds an agent call may take (run --timeout)"
        ),
        "orphan_after": SecondsSetting(
            120.0, 10.0, WEEK, "heartbeat age after which a run is interrupted"
        ),
    }
)

#: orphan_after must cover this many heartbeat intervals, so that a live worker
#: that misses a beat or two (a busy machine, a slow disk) is not taken for an orphan.
HEARTBEATS_PER_ORPHAN_AFTER = 3


def default_values() -> dict[str, float]:
    """Every plain setting at its default."""
    return {name: spec.default for name, spec in SECONDS_SETTINGS.items()}


def checked_value(values: Mapping[str, float], key: str, text: str) -> float:
    """``text`` as the new value of ``key``, given the current ``values`` of all settings.

    Raises ``InvalidSettingError`` (saying what to do instead) if ``key`` is
    unknown, ``text`` is not a number, the number is not finite or out of the
    setting's bounds, or heartbeat_interval would exceed orphan_after / 3.
    """
    spec = SECONDS_SETTINGS.get(key)
    if spec is None:
        known = ", ".join(sorted(SECONDS_SETTINGS))
        raise InvalidSettingError(f"Unknown setting {key!r}. Known: {known}.")
    try:
        seconds = float(text)
    except ValueError:
        raise InvalidSettingError(f"{text!r} is not a number of seconds.") from None
    # Written so that nan, which compares false with everything, is refused too.
    if not spec.low <= seconds <= spec.high:
        raise InvalidSettingError(
            f"{key} must be between {spec.low:g} and {spec.high:g} seconds, not {text!r}."
        )
    times = HEARTBEATS_PER_ORPHAN_AFTER
    if key == "heartbeat_interval" and seconds * times > values["orphan_after"]:
        orphan_after = values["orphan_after"]
        raise InvalidSettingError(
            f"heartbeat_interval {seconds:g} is more than a third of orphan_after "
            f"({orphan_after:g}): a live run could be taken for an orphan. Set "
            f"heartbeat_interval to at most {orphan_after / times:g}, or raise orphan_after first."
        )
    if key == "orphan_after" and seconds < values["heartbeat_interval"] * times:
        interval = values["heartbeat_interval"]
        raise InvalidSettingError(
            f"orphan_after {seconds:g} is less than three times heartbeat_interval "
            f"({interval:g}): a live run could be taken for an orphan. Set orphan_after to "
            f"at least {interval * times:g}, or lower heartbeat_interval first."
        )
    return seconds


class SkippedChange(NamedTuple):
    """A recorded change the readers ignore, and why."""

    key: str
    value: str
    reason: str


@dataclass
class SettingValues:
    """The plain settings after a history of changes."""

    values: dict[str, float] = field(default_factory=default_values)
    #: Per setting, the newest recorded change that was skipped, unless a valid
    #: change of the same setting came after it.
    skipped: dict[str, SkippedChange] = field(default_factory=dict)


def fold_values(changes: Iterable[tuple[str, str]]) -> SettingValues:
    """Apply recorded ``(key, value)`` changes, oldest first, as ``checked_value`` allows.

    A change it refuses is skipped (the setting keeps its value so far); an
    unknown key (a newer shep's setting) is ignored. Never raises.
    """
    folded = SettingValues()
    for key, text in changes:
        if key not in SECONDS_SETTINGS:
            continue
        try:
            folded.values[key] = checked_value(folded.values, key, text)
        except InvalidSettingError as e:
            folded.skipped[key] = SkippedChange(key, text, str(e))
        else:
            folded.skipped.pop(key, None)
    return folded
