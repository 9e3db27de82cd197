"""What a ``SettingChanged`` may record: the plain settings, their kinds, bounds and rules.

Said once, here, for every reader and writer of the settings stream: the
command that records a change checks it against these rules, and the readers
(the settings fold, and the checks every shep command runs, which must stay
cheap) skip a recorded value that breaks them. Older versions of shep
recorded any float (``nan``, ``inf``); skipping such a record, instead of
failing on it, keeps every command working, including the one that repairs
the setting. Pure Python: importing this costs nothing.

A setting is of one of four kinds, each with its own type of value:

- seconds (``SecondsSetting``, a ``float`` within inclusive bounds),
- a count (``CountSetting``, an ``int`` within inclusive bounds),
- an on/off flag (``FlagSetting``, a ``bool``; ``on``/``off``, ``true``/``false``,
  ``yes``/``no``, ``1``/``0`` are accepted, ``on``/``off`` recorded),
- text (``TextSetting``, a ``str``: one line, with an optional check of its own).

Recorded values are normalized (``"5"`` is recorded as ``"5.0"`` for seconds and
``"5"`` for a count, ``"yes"`` as ``"on"``), so the log reads the same whatever the
user typed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, NamedTuple

from events.errors import InvalidSettingError

#: The value of a setting: seconds, an on/off flag, a count, or text. (``bool`` is an
#: ``int`` to Python, so code that tells them apart tests for ``bool`` first.)
SettingValue = float | bool | int | str


@dataclass(frozen=True)
class SecondsSetting:
    """A duration setting: its default, the inclusive bounds of its value, what it does."""

    default: float
    low: float
    high: float
    help: str
    #: What `shep settings set KEY` takes, in help and messages.
    placeholder: ClassVar[str] = "SECONDS"

    def parse(self, key: str, text: str) -> float:
        """``text`` as a number of seconds within the bounds, or ``InvalidSettingError``."""
        try:
            seconds = float(text)
        except ValueError:
            raise InvalidSettingError(f"{text!r} is not a number of seconds.") from None
        # Written so that nan, which compares false with everything, is refused too.
        if not self.low <= seconds <= self.high:
            raise InvalidSettingError(
                f"{key} must be between {self.low:g} and {self.high:g} seconds, not {text!r}."
            )
        return seconds

    def describe(self) -> str:
        return f"{self.low:g} to {self.high:g}, default {self.default:g}"


@dataclass(frozen=True)
class CountSetting:
    """A whole-number setting: its default, the inclusive bounds of its value, what it does."""

    default: int
    low: int
    high: int
    help: str
    placeholder: ClassVar[str] = "N"

    def parse(self, key: str, text: str) -> int:
        """``text`` as a whole number within the bounds, or ``InvalidSettingError``.

        Only ASCII digits (blanks around them aside): no sign, point, exponent or
        ``_``, so ``3.5``, ``1e1``, ``nan`` and ``-1`` are refused with the bounds.
        """
        digits = text.strip()
        # More digits than any bound has would be out of bounds anyway, and int()
        # of thousands of digits is slow (and refused past sys.get_int_max_str_digits).
        if digits.isascii() and digits.isdigit() and len(digits) <= len(str(self.high)):
            count = int(digits)
            if self.low <= count <= self.high:
                return count
        raise InvalidSettingError(
            f"{key} must be a whole number from {self.low} to {self.high}, not {text!r}."
        )

    def describe(self) -> str:
        return f"whole number {self.low} to {self.high}, default {self.default}"


#: The words an on/off flag accepts (compared lowercased, without surrounding blanks).
FLAG_WORDS: Mapping[str, bool] = MappingProxyType(
    {
        "on": True,
        "true": True,
        "yes": True,
        "1": True,
        "off": False,
        "false": False,
        "no": False,
        "0": False,
    }
)


@dataclass(frozen=True)
class FlagSetting:
    """An on/off setting: its default and what it does."""

    default: bool
    help: str
    placeholder: ClassVar[str] = "on|off"

    def parse(self, key: str, text: str) -> bool:
        """``text`` as on (True) or off (False), or ``InvalidSettingError``."""
        value = FLAG_WORDS.get(text.strip().lower())
        if value is None:
            raise InvalidSettingError(
                f"{key} is on or off (or true/false, yes/no, 1/0), not {text!r}."
            )
        return value

    def describe(self) -> str:
        return f"on or off, default {show_value(self.default)}"


@dataclass(frozen=True)
class TextSetting:
    """A one-line text setting: its default, what it does, and a check of its own.

    ``check`` returns why a text is refused (a phrase that follows the key's
    name), or None to accept it.
    """

    default: str
    help: str
    check: Callable[[str], str | None] | None = None
    max_length: int = 4096
    placeholder: str = "TEXT"

    def parse(self, key: str, text: str) -> str:
        """``text`` without surrounding blanks, if it is one line that passes ``check``."""
        value = text.strip()
        if len(value) > self.max_length:
            raise InvalidSettingError(
                f"{key} must be at most {self.max_length} characters, not {len(value)}."
            )
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise InvalidSettingError(
                f"{key} must be one line without control characters, not {text!r}."
            )
        reason = self.check(value) if self.check else None
        if reason is not None:
            raise InvalidSettingError(f"{key} {reason}")
        return value

    def describe(self) -> str:
        return f"text, default {show_value(self.default)}"


Setting = SecondsSetting | CountSetting | FlagSetting | TextSetting


def command_line_problem(text: str) -> str | None:
    """Why ``text`` is not a command line ``shlex.split`` can cut into argv, or None."""
    import shlex  # only when a command is set: every shep command imports this module

    try:
        shlex.split(text)
    except ValueError as e:
        return f"is not a valid command line ({e}): quote it as a shell would, not {text!r}."
    return None


#: The characters git refuses anywhere in a branch name, besides blanks and control
#: characters (``git check-ref-format``).
_BRANCH_FORBIDDEN = "~^:?*[\\"


def branch_prefix_problem(text: str) -> str | None:
    """Why ``text`` cannot start a git branch name, or None.

    The rules of ``git check-ref-format`` that a prefix can break whatever
    follows it: a feature's branch is this prefix followed by the spec's slug,
    so a trailing ``/`` (a branch "folder") is fine, a trailing ``.`` too.
    """
    problem = _branch_prefix_rule(text)
    if problem is None:
        return None
    return f"cannot start a git branch name: {problem}, not {text!r}. For example: 'shep/'."


def _branch_prefix_rule(text: str) -> str | None:
    if not text:
        return "it is empty"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        return "it contains a blank or a control character"
    bad = sorted({c for c in text if c in _BRANCH_FORBIDDEN})
    if bad:
        return "it contains " + " ".join(bad)
    if text[0] in "-/":
        return f"it starts with {text[0]!r}"
    for sequence in ("..", "@{", "//"):
        if sequence in text:
            return f"it contains {sequence!r}"
    components = text.split("/")
    if any(part.startswith(".") for part in components):
        return "a '/'-separated part starts with '.'"
    if any(part.endswith(".lock") for part in components):
        return "a '/'-separated part ends with '.lock'"
    return None


WEEK = 7 * 24 * 3600.0

#: Every plain setting, in the order `shep settings show` lists them. Sub-second
#: heartbeats are for tests; the upper bounds catch typos (and ``1e30``) that would
#: overflow a timestamp.
SETTINGS: Mapping[str, Setting] = MappingProxyType(
    {
        "heartbeat_interval": SecondsSetting(
            30.0, 0.1, 3600.0, "seconds between worker heartbeats"
        ),
        "agent_timeout": SecondsSetting(
            1800.0, 1.0, WEEK, "seconds an agent call may take (run --timeout)"
        ),
        # Memory, not volume: output is recorded as it streams (see shep.agents.process).
        "agent_output_mib": CountSetting(
            32, 1, 4096, "MiB of an agent's output held in memory at once: its longest line"
        ),
        "orphan_after": SecondsSetting(
            120.0, 10.0, WEEK, "heartbeat age after which a run is interrupted"
        ),
        "inbox_notice": FlagSetting(True, "print `N waiting in the inbox` on every command"),
        # A feature flag: `shep settings flags` lists them.
        "collaboration": FlagSetting(
            False, "the supervisor decides inbox items its policies cover (`shep supervisor`)"
        ),
        # Cut into argv with shlex, run without a shell (see shep.home.notify).
        "notify_command": TextSetting(
            "",
            "given each new inbox item as JSON on stdin",
            check=command_line_problem,
            placeholder="'COMMAND ARG...'",
        ),
        "notify_timeout": SecondsSetting(
            10.0, 1.0, 300.0, "seconds notify_command may run before it is killed"
        ),
        # The feature workflow's (`shep feat`); `shep settings workflow` shows and sets them.
        "feature_fast": FlagSetting(
            False, "`shep feat new` implements straight from the description unless --no-fast"
        ),
        "allow_prd": FlagSetting(False, "skip the feature workflow's PRD approval gate"),
        "allow_plan": FlagSetting(False, "skip the feature workflow's plan approval gate"),
        "allow_merge": FlagSetting(False, "skip the feature workflow's merge approval gate"),
        "requirements_iterations": CountSetting(
            3, 1, 20, "rounds of open questions requirements may ask before the run fails"
        ),
        "branch_prefix": TextSetting(
            "shep/",
            "start of each feature branch name",
            check=branch_prefix_problem,
            max_length=200,
            placeholder="PREFIX",
        ),
        # Cut into argv with shlex, like notify_command.
        "worktree_setup_command": TextSetting(
            "",
            "run in each new feature worktree ('': nothing)",
            check=command_line_problem,
            placeholder="'COMMAND ARG...'",
        ),
        "worktree_setup_timeout": SecondsSetting(
            600.0, 1.0, WEEK, "seconds worktree_setup_command may run"
        ),
        "test_command": TextSetting(
            "",
            "runs a feature's tests ('': shep detects one)",
            check=command_line_problem,
            placeholder="'COMMAND ARG...'",
        ),
        "test_timeout": SecondsSetting(1800.0, 1.0, WEEK, "seconds test_command may run"),
        # What of the repository's git config shep's own git may run (see shep.git.command).
        "merge_hooks": FlagSetting(
            False, "run the repository's git hooks when shep merges into your branch"
        ),
        "git_filters": FlagSetting(
            False, "let shep's git run the filter and merge drivers of git's config (git-lfs)"
        ),
    }
)

#: The feature workflow's settings, in the order `shep settings workflow` lists them.
WORKFLOW_SETTINGS: tuple[str, ...] = (
    "feature_fast",
    "allow_prd",
    "allow_plan",
    "allow_merge",
    "requirements_iterations",
    "branch_prefix",
    "worktree_setup_command",
    "worktree_setup_timeout",
    "test_command",
    "test_timeout",
    "merge_hooks",
    "git_filters",
)

#: The feature flags: what `shep settings flags` lists and toggles.
FEATURE_FLAGS: tuple[str, ...] = ("collaboration",)

#: The settings that are numbers of seconds.
SECONDS_SETTINGS: Mapping[str, SecondsSetting] = MappingProxyType(
    {name: spec for name, spec in SETTINGS.items() if isinstance(spec, SecondsSetting)}
)

#: orphan_after must cover this many heartbeat intervals, so that a live worker
#: that misses a beat or two (a busy machine, a slow disk) is not taken for an orphan.
HEARTBEATS_PER_ORPHAN_AFTER = 3


def default_values() -> dict[str, float]:
    """Every seconds setting at its default."""
    return {name: spec.default for name, spec in SECONDS_SETTINGS.items()}


def default_counts() -> dict[str, int]:
    """Every count setting at its default."""
    return {n: s.default for n, s in SETTINGS.items() if isinstance(s, CountSetting)}


def default_flags() -> dict[str, bool]:
    """Every on/off setting at its default."""
    return {n: s.default for n, s in SETTINGS.items() if isinstance(s, FlagSetting)}


def default_texts() -> dict[str, str]:
    """Every text setting at its default."""
    return {n: s.default for n, s in SETTINGS.items() if isinstance(s, TextSetting)}


def record_value(value: SettingValue) -> str:
    """How a value is recorded in ``SettingChanged.value``: ``5.0``, ``on``, ``3``, the text."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def show_value(value: SettingValue) -> str:
    """A value as people read it: ``5``, ``on``/``off``, ``3``, the text (``""`` when empty)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return str(value)
    return value or '""'


def parse_value(values: Mapping[str, float], key: str, text: str) -> SettingValue:
    """``text`` as the new value of ``key``, given the current seconds ``values``.

    Raises ``InvalidSettingError`` (saying what to do instead) if ``key`` is
    unknown, ``text`` is not a value of the setting's kind or is out of its
    bounds, or heartbeat_interval would exceed orphan_after / 3.
    """
    spec = SETTINGS.get(key)
    if spec is None:
        known = ", ".join(sorted(SETTINGS))
        raise InvalidSettingError(f"Unknown setting {key!r}. Known: {known}.")
    value = spec.parse(key, text)
    if isinstance(value, float):
        _check_heartbeat_rule(values, key, value)
    return value


def checked_value(values: Mapping[str, float], key: str, text: str) -> str:
    """``text`` as ``key``'s new value is recorded: parsed, checked, normalized.

    The checks and errors of ``parse_value``.
    """
    return record_value(parse_value(values, key, text))


def _check_heartbeat_rule(values: Mapping[str, float], key: str, seconds: float) -> None:
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


class SkippedChange(NamedTuple):
    """A recorded change the readers ignore, and why."""

    key: str
    value: str
    reason: str


@dataclass
class SettingValues:
    """The plain settings after a history of changes, one typed dict per kind."""

    #: The seconds settings (the name predates the other kinds; readers use it).
    values: dict[str, float] = field(default_factory=default_values)
    flags: dict[str, bool] = field(default_factory=default_flags)
    texts: dict[str, str] = field(default_factory=default_texts)
    counts: dict[str, int] = field(default_factory=default_counts)
    #: Per setting, the newest recorded change that was skipped, unless a valid
    #: change of the same setting came after it.
    skipped: dict[str, SkippedChange] = field(default_factory=dict)

    def get(self, key: str) -> SettingValue:
        """The value of any setting (``KeyError`` for an unknown one)."""
        kinds: tuple[Mapping[str, SettingValue], ...] = (
            self.values,
            self.flags,
            self.texts,
            self.counts,
        )
        for kind in kinds:
            if key in kind:
                return kind[key]
        raise KeyError(key)

    def put(self, key: str, value: SettingValue) -> None:
        """Set a setting's value into the dict of its kind."""
        if isinstance(value, bool):  # before int: a bool is an int
            self.flags[key] = value
        elif isinstance(value, int):
            self.counts[key] = value
        elif isinstance(value, float):
            self.values[key] = value
        else:
            self.texts[key] = value

    def every(self) -> dict[str, SettingValue]:
        """Every setting's value, in the order of ``SETTINGS``."""
        return {key: self.get(key) for key in SETTINGS}


def fold_values(changes: Iterable[tuple[str, str]]) -> SettingValues:
    """Apply recorded ``(key, value)`` changes, oldest first, as ``parse_value`` allows.

    A change it refuses is skipped (the setting keeps its value so far); an
    unknown key (a newer shep's setting) is ignored. Never raises.
    """
    folded = SettingValues()
    for key, text in changes:
        if key not in SETTINGS:
            continue
        try:
            folded.put(key, parse_value(folded.values, key, text))
        except InvalidSettingError as e:
            folded.skipped[key] = SkippedChange(key, text, str(e))
        else:
            folded.skipped.pop(key, None)
    return folded
