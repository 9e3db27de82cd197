"""What varies between two real runs of a scenario, made stable or masked.

Two layers, documented in docs/architecture.md ("How the pages with output
are made"):

- **Stand-ins**, written into the page: every id and hash (a run of seven or
  more hex digits, dashed UUIDs included, and the shortened forms of the same
  value), every worker pid, every SSH key fingerprint is replaced by a
  stand-in of the same length. The same value gets the same stand-in
  everywhere on the page (a run id and its 8-digit prefix stay a full id and
  its prefix), and stand-ins are numbered in the order the values first appear
  on the page, so two runs of a scenario give the same stand-ins.
- **Masks**, used only to compare a page with a fresh run: times, dates, ages
  and durations become ``<time>`` and ``<dur>``, byte offsets ``<n>``, and runs
  of blanks one blank (a longer age widens a table's column). A page whose
  blocks equal the fresh run's under the masks is left as it is, so the
  pages do not change each time the generator runs.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Collection, Sequence

#: A run of 7+ hex digits (a dashed UUID, or a prefix of one, counts as one token).
_TOKEN = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,}(?:-[0-9a-f]{4,12})*(?![0-9A-Za-z_])")
_LETTER = re.compile(r"[a-f]")
#: Lengths of whole values: a UUID's 32 hex digits, a git object id's 40, a sha256's 64.
_WHOLE = (32, 40, 64)
#: Where a pid is printed: "worker 2187", "pid 2187", "process 2187", "ps -p 2187", "pid": 2187.
_PID = re.compile(
    r"(?P<lead>\b(?:[Ww]orker|pid|PID|process|-p) |\"(?:worker_)?pid\": ?)(?P<pid>\d{2,8})\b"
)
_FILES = re.compile(r"\b\d+ files\b")
_SSH_FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?)?(?:Z|[+-]\d\d:?\d\d| UTC)?"
        ),
        "<time>",
    ),
    (
        re.compile(
            r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
            r" +\d+ \d\d:\d\d:\d\d \d{4}(?: [+-]\d{4})?"
        ),
        "<time>",
    ),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "<time>"),
    (re.compile(r"(\"\w+_ms\"): ?\d+"), r"\1:<dur>"),
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s|m|h|d)\b"), "<dur>"),
    (re.compile(r"\bbyte \d+"), "byte <n>"),
    # A replay frame's range of log positions: a worker's checkpoint writes and node
    # events may interleave differently within a step.
    (re.compile(r"\bpositions \d+-\d+"), "positions <n>-<n>"),
    (re.compile(r"(\"(?:first|last)_position\"): ?\d+"), r"\1:<n>"),
    (re.compile(r"[ \t]+"), " "),
)


def has_letter(token: str) -> bool:
    return _LETTER.search(token) is not None


def _hex(seed: str, length: int) -> str:
    out = ""
    n = 0
    while len(out) < length:
        out += hashlib.sha256(f"{seed}#{n}".encode()).hexdigest()
        n += 1
    return out[:length]


def _dashed_like(original: str, digits: str) -> str:
    """``digits`` with dashes where ``original`` has them."""
    out = []
    it = iter(digits)
    for char in original:
        out.append("-" if char == "-" else next(it))
    return "".join(out)


class _HexStandIns:
    """Stand-ins for the hex tokens of one page (see the module doc)."""

    def __init__(self, texts: Sequence[str], known: Collection[str], seed: str) -> None:
        self.seed = seed
        self.first_full: dict[str, int] = {}
        tokens = [m.group().replace("-", "") for text in texts for m in _TOKEN.finditer(text)]
        for n, token in enumerate(tokens):
            self.first_full.setdefault(token, n)
        self.unseen = len(tokens)
        self.roots = sorted(
            {k for k in known if has_letter(k)} | {t for t in tokens if has_letter(t)}
        )
        #: Whole values the stores hold: one with no hex letter (a worktree's 12-digit
        #: name, one in 280) is still an id, not a number.
        self.known = frozenset(known)
        self.ordinal: dict[str, int] = {}
        self._root_of: dict[str, str | None] = {}

    def root_of(self, token: str) -> str | None:
        """The full value ``token`` stands for (itself, or the value it is a prefix of)."""
        if token not in self._root_of:
            # A UUID, a git object id, a sha256 is a whole value, never a prefix.
            whole = len(token) in _WHOLE
            longer = [
                r for r in self.roots if not whole and len(r) > len(token) and r.startswith(token)
            ]
            if longer:
                # A prefix: of the value shown first on the page (or of the shortest,
                # smallest one when several share it and none is shown).
                self._root_of[token] = min(
                    longer, key=lambda r: (self.first_full.get(r, self.unseen), len(r), r)
                )
            else:
                self._root_of[token] = token if has_letter(token) or token in self.known else None
        return self._root_of[token]

    def replace(self, match: re.Match[str]) -> str:
        shown = match.group()
        token = shown.replace("-", "")
        root = self.root_of(token)
        if root is None:
            return shown
        number = self.ordinal.setdefault(root, len(self.ordinal))
        return _dashed_like(shown, _hex(f"{self.seed}:{number}", len(root))[: len(token)])


def stand_in(
    texts: Sequence[str], known: Collection[str], seed: str, loose: Collection[int] = ()
) -> list[str]:
    """``texts`` (a page's generated blocks, in page order) with stand-ins for what varies.

    ``known`` holds full ids and hashes the scenario's stores and repositories
    hold, so that a prefix shown alone (which may be all digits) is still
    recognised; ``seed`` (the page's name) makes the stand-ins of two pages differ.
    The texts whose indexes are in ``loose`` have lines in an order that varies:
    stand-ins are numbered as if their lines were sorted, so that they do not
    depend on that order.
    """
    hexes = _HexStandIns(texts, known, seed)
    # Number the values in a stable order first: page order, loose texts' lines sorted.
    for n, text in enumerate(texts):
        lines = sorted(text.split("\n"), key=loosened) if n in loose else [text]
        for line in lines:
            for match in _TOKEN.finditer(line):
                hexes.replace(match)
    pids: dict[str, str] = {}
    keys: dict[str, str] = {}

    def pid(match: re.Match[str]) -> str:
        value = pids.setdefault(match["pid"], str(2100 + 37 * len(pids)))
        return match["lead"] + value

    def fingerprint(match: re.Match[str]) -> str:
        if match.group() not in keys:
            digest = hashlib.sha256(f"{seed}:key:{len(keys)}".encode()).digest()
            keys[match.group()] = "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
        return keys[match.group()]

    return [
        _SSH_FINGERPRINT.sub(fingerprint, _PID.sub(pid, _TOKEN.sub(hexes.replace, text)))
        for text in texts
    ]


def loosened(text: str) -> str:
    """``text``'s lines masked, with ids and hashes masked too, sorted: for comparing a
    block whose lines come in an order that varies (parallel tasks)."""
    # Parallel tasks list the worktree while the other one writes: how many files each
    # saw varies too.
    lines = _FILES.sub("<n> files", _TOKEN.sub("<hex>", mask(text))).split("\n")
    return "\n".join(sorted(lines))


def mask(text: str) -> str:
    """``text`` with times, durations and byte offsets masked, blanks collapsed, for comparing."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")
