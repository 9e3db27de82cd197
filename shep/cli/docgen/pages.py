"""The pages that show output: run their scenarios for real, compare, rewrite the marked blocks.

A scenario (``shep.cli.docgen.scenarios.<name>``) plays a story with the real CLI
in a scratch directory and records each step's commands and output. Every
page under docs/ (and the README) marking blocks ``<name>/<step>`` gets them,
with stand-ins for what varies (``stable.py``). A page is rewritten only when
one of its blocks no longer matches the fresh run under the masks, and then
all its blocks of that scenario are taken from the fresh run, so a page always
shows one run.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import signal
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from shep.cli.docgen.blocks import Block, find_blocks, replace_blocks
from shep.cli.docgen.reference import CLONE
from shep.cli.docgen.scratch import DISPLAY_ROOT, ScenarioError, Scratch, Transcript
from shep.cli.docgen.stable import loosened, mask, stand_in

#: Every scenario, by the name its pages' markers use.
SCENARIOS = ("questions", "questions-edges", "audit", "features", "supervisor", "teams")


def page_paths() -> list[Path]:
    """The pages that may mark generated blocks: docs/*.md and the README."""
    return [*sorted((CLONE / "docs").glob("*.md")), CLONE / "README.md"]


def _module(name: str) -> ModuleType:
    if name not in SCENARIOS:
        raise ScenarioError(f"no scenario {name!r}; the scenarios are {', '.join(SCENARIOS)}")
    return importlib.import_module(f".scenarios.{name.replace('-', '_')}", __package__)


def missing(name: str) -> str | None:
    """What the machine lacks to play scenario ``name`` (a program, a server), or None."""
    check: Callable[[], str | None] | None = getattr(_module(name), "missing", None)
    return check() if check else None


@dataclass
class Played:
    """A scenario's steps (as displayed, before stand-ins) and the ids its stores hold."""

    name: str
    steps: dict[str, str]
    known: set[str]
    #: Steps whose lines come in an order that varies (see ``Transcript.add``).
    loose: set[str] = field(default_factory=set)


def play(name: str) -> Played:
    """Play scenario ``name`` in a fresh scratch directory, removed afterwards."""
    module = _module(name)
    with tempfile.TemporaryDirectory(prefix=f"shep-docs-{name}-") as tmp:
        scratch = Scratch(Path(tmp), display_root=getattr(module, "DISPLAY_ROOT", DISPLAY_ROOT))
        transcript = Transcript()
        try:
            module.play(scratch, transcript)
            known = scratch.known_tokens()
        finally:
            _stop_leftovers(scratch)
    return Played(name, transcript.steps, known, transcript.loose)


def _stop_leftovers(scratch: Scratch) -> None:
    """A scenario that failed half way may leave workers behind: they must not outlive it."""
    for pid, _ in scratch.processes():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class PageResult:
    """One page against a fresh run: the blocks that no longer match, and the page rewritten."""

    path: Path
    stale: list[tuple[str, str]] = field(default_factory=list)
    text: str = ""

    @property
    def label(self) -> str:
        return _label(self.path)


def _label(path: Path) -> str:
    return str(path.relative_to(CLONE)) if path.is_relative_to(CLONE) else str(path)


def _diff(old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.split("\n"), new.split("\n"), "page", "program", n=1, lineterm=""
    )
    return "\n".join(list(lines)[:40])


def compare(
    played: Played, *, force: bool = False, pages: Sequence[Path] | None = None
) -> list[PageResult]:
    """Every page (of ``pages``, default ``page_paths()``) marking blocks of ``played``'s
    scenario, against it; with ``force``, the pages are rewritten even where they match.

    Raises ``ScenarioError`` when a page marks a step the scenario does not
    record, or when a step is marked on no page.
    """
    results = []
    marked: set[str] = set()
    for path in page_paths() if pages is None else pages:
        text = path.read_text()
        label = _label(path)
        mine: list[Block] = [b for b in find_blocks(text, label) if b.scenario == played.name]
        if not mine:
            continue
        unknown = [b.name for b in mine if b.step not in played.steps]
        if unknown:
            raise ScenarioError(f"{label} marks {', '.join(unknown)}: no such step is recorded")
        marked |= {b.step for b in mine}
        loose = {n for n, b in enumerate(mine) if b.step in played.loose}
        # Stand-ins are numbered per page and scenario: another scenario's blocks on the
        # page are another world (another home), whose values never meet these.
        seed = f"{path.name}:{played.name}"
        fresh = stand_in([played.steps[b.step] for b in mine], played.known, seed, loose)
        result = PageResult(path, text=text)
        for n, (block, new) in enumerate(zip(mine, fresh, strict=True)):
            compared = loosened if n in loose else mask
            if compared(block.text) != compared(new):
                result.stale.append((block.name, _diff(compared(block.text), compared(new))))
        if result.stale or force:
            result.text = replace_blocks(
                text, {b.name: new for b, new in zip(mine, fresh, strict=True)}, label
            )
        results.append(result)
    unused = sorted(set(played.steps) - marked)
    if unused:
        raise ScenarioError(
            f"scenario {played.name} records steps no page marks: {', '.join(unused)}"
        )
    return results
