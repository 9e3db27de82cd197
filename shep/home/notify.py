"""Tell someone a run waits for them: the ``notify_command`` setting.

When a worker suspends a run on new questions or approval gates, each new
item is written, as one JSON object (``item_payload``), to the standard input
of ``notify_command``, so a user can forward it to a phone or a chat. The
command line is cut into argv with ``shlex`` and run without a shell, in its
own session (process group), with stdout discarded and stderr kept in a
temporary file (a pipe could block on a command that leaves a child behind).

The command never blocks nor fails the run: the run is already suspended
when it is called; a command that cannot start, exits non-zero or runs past
``notify_timeout`` (its whole process group is then killed) is recorded as
``NotificationFailed``; one that exits 0 as ``NotificationSent``. The items
are notified in parallel, so the call returns within about ``notify_timeout``
however many there are. Agent tokens never reach the JSON nor the events:
any that shows up (an agent quoting one in its question, a command echoing
one on stderr) is masked.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec

from commands.inbox_state import ItemState, load_item
from commands.record_notification import record_notification, was_notified
from events.errors import ShepError
from events.inbox import QuestionAsked
from events.runs import RunCreated
from events.store import EventStore
from shep.home.secrets import load_token
from shep.home.settings import Settings

#: How much of a failed command's stderr is recorded (its end, where the error usually is).
STDERR_TAIL_CHARS = 500
MASK = "********"


@dataclass(frozen=True)
class _Job:
    item_id: UUID
    payload: bytes


def notify_new_items(
    store: EventStore,
    home: Path,
    item_ids: list[UUID],
    settings: Settings,
    *,
    say: Callable[[str], None] | None = None,
) -> None:
    """Give each new, undecided item to ``notify_command`` and record the outcome.

    Does nothing when ``notify_command`` is empty. An item already notified
    (``NotificationSent``) is not notified again. Never raises for the
    command's failures; a failure to read or record an item in the store is
    one line told to ``say``, and the other items go on.
    """
    command = settings.texts["notify_command"]
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = []  # refused when set; an older record is skipped by the fold anyway
    if not argv or not item_ids:
        return
    items: list[tuple[ItemState, RunCreated | None]] = []
    for item_id in item_ids:
        try:
            item = load_item(store, item_id)
            if item is None or item.decision is not None or was_notified(store, item_id):
                continue
            items.append((item, _run_created(store, item.asked.run_id)))
        except ShepError as e:
            _warn(say, item_id, e)
    if not items:
        return
    agents = {settings.agent_type, *(run.agent_type for _, run in items if run)}
    secrets = _tokens(home, agents)
    jobs = [
        _Job(
            item.item_id,
            _mask(msgspec.json.encode(item_payload(item, run, home)).decode(), secrets).encode()
            + b"\n",
        )
        for item, run in items
    ]
    timeout = settings.values["notify_timeout"]
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="shep-notify") as pool:
        errors = list(pool.map(lambda job: run_notify_command(argv, job.payload, timeout), jobs))
    shown = _mask(command, secrets)
    for job, error in zip(jobs, errors, strict=True):
        try:
            record_notification(
                store,
                job.item_id,
                command=shown,
                error=None if error is None else _mask(error, secrets),
            )
        except ShepError as e:
            _warn(say, job.item_id, e)


def item_payload(item: ItemState, run: RunCreated | None, home: Path) -> dict[str, Any]:
    """The JSON object a ``notify_command`` reads for one item, its decision commands included.

    The keys of ``shep inbox --json`` (the same for both kinds), plus
    ``commands``: the shep command lines that decide the item. ``run`` is the
    item's run as created (None if its stream lacks it); ``home`` the store's
    shep home, named in the commands when it is not the default.
    """
    asked = item.asked
    item_hex = item.item_id.hex
    shep = _shep_prefix(home)
    fields: dict[str, Any]
    if isinstance(asked, QuestionAsked):
        fields = {
            "prompt": asked.question,
            "context": asked.context,
            "options": [msgspec.to_builtins(o) for o in asked.options],
            "free_text": asked.free_text,
            "phase": None,
            "artifacts": [],
            "deadline": asked.deadline,
            "commands": {
                "answer": {
                    o.id: f"{shep} answer {item_hex} --option {shlex.quote(o.id)}"
                    for o in asked.options
                },
                "answer_text": f"{shep} answer {item_hex} TEXT" if asked.free_text else None,
            },
        }
    else:
        fields = {
            "prompt": asked.summary,
            "context": "",
            "options": [],
            "free_text": False,
            "phase": asked.phase,
            "artifacts": [msgspec.to_builtins(a) for a in asked.artifacts],
            "deadline": None,
            "commands": {
                "approve": f"{shep} approve {item_hex}",
                "reject": f"{shep} reject {item_hex} --reason REASON",
            },
        }
    return {
        "item_id": item_hex,
        "kind": item.kind,
        "run_id": asked.run_id.hex,
        "workflow": run.workflow if run else None,
        "repo": run.repo if run else None,
        "node": asked.node,
        "iteration": asked.iteration,
        "asked_at": asked.timestamp.isoformat(),
    } | fields


def run_notify_command(argv: list[str], payload: bytes, timeout: float) -> str | None:
    """Run ``argv`` with ``payload`` on its stdin; None if it exits 0, else what went wrong.

    Bounded by ``timeout`` seconds, after which its process group is killed.
    Never raises for the command's own failures.
    """
    with tempfile.TemporaryFile() as stderr:
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        except FileNotFoundError:
            return f"{argv[0]!r} was not found: check notify_command"
        except PermissionError:
            return f"{argv[0]!r} cannot be run (permission denied): check notify_command"
        except (OSError, ValueError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else e
            return f"{argv[0]!r} cannot be run ({reason}): check notify_command"
        try:
            process.communicate(payload, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return f"timed out after {timeout:g}s; killed"
        except (OSError, subprocess.SubprocessError) as e:
            _kill_group(process)
            return f"could not be given the item: {e}"
        if process.returncode == 0:
            return None
        code = process.returncode
        what = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        stderr.seek(0)
        tail = _tail(stderr.read())
        return f"{what}: {tail}" if tail else what


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    # start_new_session made the command its group's leader: its pid is the group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def _tail(raw: bytes) -> str:
    """The end of a command's stderr, on one line."""
    lines = (line.strip() for line in raw.decode(errors="replace").splitlines())
    text = " / ".join(line for line in lines if line)
    return text if len(text) <= STDERR_TAIL_CHARS else "..." + text[-STDERR_TAIL_CHARS:]


def _shep_prefix(home: Path) -> str:
    """``shep``, with SHEP_HOME set in front when the store is not the default one."""
    # The default of events.sqlite_file.home_from_env.
    default = Path(os.path.expanduser("~")) / ".shep"
    if Path(home).resolve() == default.resolve():
        return "shep"
    return f"SHEP_HOME={shlex.quote(str(home))} shep"


def _run_created(store: EventStore, run_id: UUID) -> RunCreated | None:
    created = store.load(run_id, types=[RunCreated])
    return created[0] if created and isinstance(created[0], RunCreated) else None


def _tokens(home: Path, agents: set[str | None]) -> list[str]:
    """The stored tokens of these agents (an unreadable secrets file has none to leak)."""
    tokens = []
    for agent in sorted(a for a in agents if a):
        with contextlib.suppress(ShepError):
            token = load_token(home, agent)
            if token:
                tokens.append(token)
    return tokens


def _mask(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def _warn(say: Callable[[str], None] | None, item_id: UUID, error: Exception) -> None:
    if say is not None:
        say(f"shep: could not notify inbox item {item_id.hex[:8]}: {error}")
