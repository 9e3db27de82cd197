"""A throwaway world for one scenario: a temp directory, shep homes, and the commands run there.

Every command is run by bash, as a user types it, with ``shep`` on ``PATH``
being this interpreter's shep; its stdout and stderr go to one pipe, in the
order they were written (``PYTHONUNBUFFERED``), as a terminal shows them. No
terminal is attached: progress is printed one line per step, and ``shep
inbox`` prints its list instead of opening the picker. The environment is
built from scratch (a user ``alice`` on a host ``vm``, UTC, a git identity of
its own), so nothing of the person running the generator leaks into a page.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shep.cli.docgen.reference import CLONE

#: Ids and hashes in a store's bytes: whole words only (in binary, an id may run into
#: bytes that read as hex digits; such a run is no value of its own).
_KNOWN = re.compile(
    rb"(?<![0-9A-Za-z])(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    rb"|[0-9a-f]{12,})(?![0-9A-Za-z])"
)


#: How the scratch directory is shown on the pages (a name only: nothing is made there).
DISPLAY_ROOT = "/tmp/doc"  # noqa: S108


class ScenarioError(RuntimeError):
    """A scenario's command did something else than the scenario expects."""


@dataclass(frozen=True)
class Shown:
    """A command as the page shows it, with its output (paths already as displayed)."""

    prompt: str
    command: str
    output: str
    code: int

    def render(self) -> str:
        lines = [f"{self.prompt}$ {self.command}"]
        if self.output:
            lines.append(self.output.rstrip("\n"))
        return "\n".join(lines)


class Scratch:
    """One scenario's temp directory, its environment and its commands."""

    def __init__(
        self, root: Path, *, display_root: str = DISPLAY_ROOT, user: str = "alice"
    ) -> None:
        self.root = root.resolve()
        self.display_root = display_root
        self.shown_as: list[tuple[str, str]] = []
        self.bin = self.root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        user_home = self.root / "user"
        user_home.mkdir(exist_ok=True)
        (user_home / ".gitconfig").write_text(
            "[user]\n\tname = Alice\n\temail = alice@example.com\n"
            "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"
        )
        shep = self.bin / "shep"
        # This interpreter's shep, whatever is installed elsewhere on PATH.
        shep.write_text(f'#!/bin/sh\nexec "{sys.executable}" -P -m shep "$@"\n')
        shep.chmod(0o755)
        self.env: dict[str, str] = {
            "PATH": os.pathsep.join([str(self.bin), os.environ.get("PATH", "/usr/bin:/bin")]),
            "HOME": str(user_home),
            "USER": user,
            "LOGNAME": user,
            "SHEP_HOST": "vm",
            "SHEP_HOME": str(self.home),
            "TZ": "UTC",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(CLONE),
            "GIT_CONFIG_NOSYSTEM": "1",
            "TMPDIR": str(self._tmp()),
            # No keeper of a shared home's copy (it would outlive the scenario by half an
            # hour): docs/teams.md describes it.
            "SHEP_SHARED_KEEPER": "0",
        }

    @property
    def home(self) -> Path:
        """The default ``SHEP_HOME``."""
        return self.root / "home"

    def _tmp(self) -> Path:
        tmp = self.root / "tmp"
        tmp.mkdir(exist_ok=True)
        return tmp

    def display(self, text: str) -> str:
        """``text`` with the scratch directory shown as ``display_root`` (and whatever
        else a scenario asked to show otherwise: a server's port)."""
        for real, shown in self.shown_as:
            text = text.replace(real, shown)
        return text.replace(str(self.root), self.display_root)

    def wait_for(self, done: Callable[[], bool], what: str, timeout: float = 120) -> None:
        """Poll ``done`` until it holds."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise ScenarioError(f"gave up waiting for {what}")
            time.sleep(0.2)

    def install(self, name: str, source: Path) -> Path:
        """An executable ``name`` on PATH running ``source`` with this interpreter."""
        target = self.bin / name
        target.write_text(f"#!{sys.executable}\n" + source.read_text())
        target.chmod(0o755)
        return target

    def sh(
        self,
        command: str,
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        code: int | None = 0,
        prompt: str = "",
        timeout: float = 300,
        stdin: str | None = None,
    ) -> Shown:
        """Run ``command`` with bash; ``code`` is the exit status the scenario expects
        (None: any), ``stdin`` what it reads. Anything else raises ``ScenarioError`` with the
        output."""
        try:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=cwd or self.root,
                env={**self.env, **(env or {})},
                input=stdin.encode() if stdin is not None else b"",
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise ScenarioError(f"`{command}` did not end in {timeout:.0f}s") from e
        output = done.stdout.decode("utf-8", "replace")
        if code is not None and done.returncode != code:
            raise ScenarioError(
                f"`{command}` exited {done.returncode}, expected {code}:\n{output.rstrip()}"
            )
        return Shown(prompt, self.display(command), self.display(output), done.returncode)

    def lines(self, *commands: str, **options: Any) -> list[Shown]:
        """Commands run by one bash, so that a variable set by one is seen by the next;
        shown one per line, the output after the last (the others must print nothing)."""
        done = self.sh("\n".join(commands), **options)
        shown = [Shown(done.prompt, self.display(c), "", 0) for c in commands]
        shown[-1] = Shown(done.prompt, shown[-1].command, done.output, done.code)
        return shown

    def out(self, command: str, **options: object) -> str:
        """The output of ``command`` (not shown on a page), stripped."""
        return self.sh(command, **options).output.strip()  # type: ignore[arg-type]

    def settle(
        self, *, timeout: float = 180, ignore: Callable[[str], bool] = lambda cmdline: False
    ) -> None:
        """Wait until no process of this scratch runs (background workers, agents, supervisor),
        except those ``ignore`` accepts by command line: the next command then sees the
        runs as a person coming back later would."""
        deadline = time.monotonic() + timeout
        while True:
            busy = [f"{pid}: {c}" for pid, c in self.processes() if not ignore(c)]
            if not busy:
                return
            if time.monotonic() > deadline:
                raise ScenarioError("processes still running: " + "; ".join(busy))
            time.sleep(0.1)

    def processes(self) -> list[tuple[int, str]]:
        """The pid and command line of every process whose ``SHEP_HOME`` is in this scratch
        directory: they were all started by the scenario's commands."""
        from shep.home.procs import command_line, processes_with

        found = []
        for pid, home in processes_with("SHEP_HOME"):
            if pid != os.getpid() and home.startswith(str(self.root)):
                line = command_line(pid)
                if line is not None:
                    found.append((pid, line))
        return found

    def known_tokens(self, extra_repos: Iterable[Path] = ()) -> set[str]:
        """Full ids and hashes this scratch's stores and git repositories hold."""
        known: set[str] = set()
        for path in self.root.rglob("*"):
            if path.is_file() and (path.suffix == ".db" or path.name.endswith(".db-wal")):
                with contextlib.suppress(OSError):
                    known |= {
                        m.decode().replace("-", "") for m in _KNOWN.findall(path.read_bytes())
                    }
        repos = {p.parent for p in self.root.rglob(".git") if p.is_dir()} | set(extra_repos)
        for repo in repos:
            listed = subprocess.run(
                ["git", "-C", str(repo), "rev-list", "--all"],
                capture_output=True,
                text=True,
                check=False,
                env=self.env,
            )
            known |= set(listed.stdout.split())
        return known


class Transcript:
    """The blocks a scenario produced, by step name, as the page will show them."""

    def __init__(self) -> None:
        self.steps: dict[str, str] = {}
        self.loose: set[str] = set()

    def add(self, step: str, *parts: Shown | str, gap: bool = False, loose: bool = False) -> None:
        """Step ``step`` shows ``parts`` (commands with their output, or text) one after
        another; with ``gap``, a blank line between them. ``loose``: its lines come in an
        order that varies between runs (parallel tasks), and are compared as a set."""
        if step in self.steps:
            raise ScenarioError(f"step {step} is recorded twice")
        if loose:
            self.loose.add(step)
        rendered = [p.render() if isinstance(p, Shown) else p.rstrip("\n") for p in parts]
        self.steps[step] = ("\n\n" if gap else "\n").join(rendered)
