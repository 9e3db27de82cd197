"""A fake `claude` CLI for the feature workflow: a real subprocess that acts on the prompt markers.

It speaks claude-code's ``-p --output-format stream-json --verbose`` (prompt on
stdin), finds the step's ``[shep feature: STEP ...]`` marker and does what the
contract asks of that step in its working directory (the worktree): writes
spec.yaml with the number and branch named in the prompt, research.yaml,
plan.yaml and tasks.yaml, each task's ``Files:`` (a line per task, appended to a
file that exists), a repair of a named file, a ``git merge`` of the base for
``resolve``. Every call is logged to ``FEATURE_LOG`` (JSON lines, an ``event``
of ``start`` then ``end``: ``key``, ``step``, ``arg``, ``pid``, ``time``,
``prompt``, ``written`` (path -> content)), so tests can prove what ran, when,
and with what prompt.

What each test wants is a JSON script named by ``FEATURE_SCRIPT`` (every key
optional; counters live in ``FEATURE_STATE``, a directory, across calls):

- ``delay``: seconds every call takes (default 0.01); ``sleep``: {key: seconds}.
- ``questions``: open questions written while the prompt has no
  ``Answers to your open questions:`` line; ``questions_after_answers``: those
  written once it has (default none); ``questions_rounds``: instead, a list of
  lists, the questions of each valid spec.yaml written, in turn.
- ``invalid``: {file name: N}: the first N writes of that spec file (by its step
  or by repair) are invalid (plan.yaml without ``phases``, and so on).
- ``phases``, ``tasks``: the plan written (default: one serial phase, tasks t1
  and t2, each writing its own file under src/).
- ``fast_files``: {path: content} the ``fast`` step writes.
- ``calls``: {key: [behaviour, ...]}: the Nth call of ``key`` takes the Nth
  behaviour: ``{"hang": true}`` (write a ``cut off`` line to each of the task's
  files, sleep ``hang_seconds`` (default 120) or until the file ``until`` exists,
  then write a ``woke up`` line and go on), ``{"exit": CODE}`` (fail with an error
  result), ``{"shell": "COMMAND"}`` (run ``sh -c COMMAND`` in the worktree first, as an
  agent's shell tool would, then act as usual), ``{}`` (the default).
- ``after_hang_of``: {key: other key}: the task ``key`` starts its work only once
  the call ``other key`` hangs (so a parallel sibling is surely half-written).

A call's ``key`` is its step, or ``implement:ID`` for a task, ``repair:FILE NAME``
for a repair.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

MARKER = re.compile(
    r"^\[shep feature: (?P<step>[a-z]+)(?: (?P<name>\w+)=(?P<arg>[^\]]*))?\]$", re.M
)
SPEC_DIR = re.compile(r"^Spec directory: (?P<path>\S+)$", re.M)
BRANCH = re.compile(r"^Branch: (?P<branch>\S+) \(based on (?P<base>[^)]+)\)$", re.M)
FILES = re.compile(r"^Files: ?(?P<files>.*)$", re.M)
FEATURE = re.compile(r"^Feature: (?P<text>.*)$", re.M)
ANSWERS = "Answers to your open questions:"
REJECTED = "A reviewer rejected the previous result of this step. Their reason:"

DEFAULT_PHASES = [{"id": "p1", "name": "Build it", "parallel": False}]
DEFAULT_TASKS = [
    {"id": "t1", "phase": "p1", "files": ["src/feature_one.py"]},
    {"id": "t2", "phase": "p1", "files": ["src/feature_two.py"]},
]


def script() -> dict[str, Any]:
    path = os.environ.get("FEATURE_SCRIPT")
    if not path or not os.path.exists(path):
        return {}
    with open(path) as f:
        loaded: dict[str, Any] = json.load(f)
    return loaded


@contextlib.contextmanager
def state_lock() -> Iterator[Path]:
    """The counters' directory, held exclusively (tasks run side by side)."""
    root = Path(os.environ.get("FEATURE_STATE", "/tmp/feature-state"))
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def bump(counter: str) -> int:
    """Add one to ``counter``; return its value before."""
    with state_lock() as root:
        path = root / "counters.json"
        counts = json.loads(path.read_text()) if path.exists() else {}
        before = int(counts.get(counter, 0))
        counts[counter] = before + 1
        path.write_text(json.dumps(counts))
    return before


def log(**fields: Any) -> None:
    path = os.environ.get("FEATURE_LOG")
    if not path:
        return
    line = json.dumps({**fields, "time": time.time(), "pid": os.getpid()}) + "\n"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def result(session: str, text: str, *, error: bool = False) -> None:
    emit(
        {
            "type": "result",
            "subtype": "success",
            "is_error": error,
            "api_error_status": None,
            "duration_ms": 10,
            "num_turns": 1,
            "result": text,
            "session_id": session,
            "total_cost_usd": 0.001,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }
    )


class Call:
    """One call: the prompt's marker and header lines, and what it wrote."""

    def __init__(self, prompt: str, plan: dict[str, Any]) -> None:
        self.prompt = prompt
        self.plan = plan
        marker = list(MARKER.finditer(prompt))
        found = marker[-1] if marker else None
        self.step = found["step"] if found else "unknown"
        self.arg = found["arg"] if found and found["arg"] is not None else None
        if self.step == "implement":
            self.key = f"implement:{self.arg}"
        elif self.step == "repair":
            self.key = f"repair:{Path(self.arg or '').name}"
        else:
            self.key = self.step
        spec_dir = SPEC_DIR.search(prompt)
        self.spec_dir = spec_dir["path"] if spec_dir else "specs/000-unknown"
        branch = BRANCH.search(prompt)
        self.branch = branch["branch"] if branch else "unknown"
        self.base = branch["base"] if branch else "main"
        feature = FEATURE.search(prompt)
        self.feature = feature["text"] if feature else "a feature"
        self.written: dict[str, str] = {}

    def write(self, relative: str, content: str) -> None:
        path = Path.cwd() / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        self.written[relative] = content

    def append(self, relative: str, line: str) -> None:
        path = Path.cwd() / relative
        before = path.read_text() if path.exists() else ""
        self.write(relative, before + line)

    # -- the spec files ---------------------------------------------------------------------

    def spec_file(self, name: str) -> None:
        """Write ``name`` (spec.yaml, research.yaml, plan.yaml or tasks.yaml), or an
        invalid one while the script's ``invalid`` count for it lasts."""
        relative = f"{self.spec_dir}/{name}"
        if bump(f"writes:{name}") < int(self.plan.get("invalid", {}).get(name, 0)):
            self.write(relative, INVALID[name])
            return
        self.write(relative, yaml.safe_dump(self.content(name), sort_keys=False))

    def content(self, name: str) -> dict[str, Any]:
        if name == "spec.yaml":
            answered = ANSWERS in self.prompt
            key = "questions_after_answers" if answered else "questions"
            questions = self.plan.get(key, [])
            if "questions_rounds" in self.plan:
                rounds = self.plan["questions_rounds"]
                done = bump("rounds:spec.yaml")
                questions = rounds[done] if done < len(rounds) else []
            return {
                "name": "Fake feature",
                "number": int(Path(self.spec_dir).name.split("-", 1)[0]),
                "branch": self.branch,
                "one_liner": f"Add {self.feature}",
                "summary": "A feature written by the fake agent.",
                "phase": "requirements",
                "content": "## What\n\nThe feature.\n\n## Acceptance\n\n- it works\n",
                "technologies": ["Python"],
                "size": "S",
                "open_questions": questions,
            }
        if name == "research.yaml":
            return {
                "decisions": [
                    {
                        "title": "Storage",
                        "chosen": "SQLite",
                        "rejected": ["flat files"],
                        "rationale": "already used",
                    }
                ]
            }
        tasks = self.tasks()
        if name == "plan.yaml":
            paths = list(dict.fromkeys(f for task in tasks for f in task["files"]))
            existing = {p for p in paths if (Path.cwd() / p).exists()}
            return {
                "phases": self.plan.get("phases", DEFAULT_PHASES),
                "files": [
                    {"path": p, "action": "modify" if p in existing else "create"} for p in paths
                ],
            }
        return {"tasks": tasks}

    def tasks(self) -> list[dict[str, Any]]:
        return [
            {
                "id": task["id"],
                "title": task.get("title", f"Task {task['id']}"),
                "state": "todo",
                "phase": task["phase"],
                "acceptance": [f"{task['id']} is done"],
                "files": task["files"],
                "description": "",
            }
            for task in self.plan.get("tasks", DEFAULT_TASKS)
        ]

    # -- the steps ----------------------------------------------------------------------------

    def act(self, behaviour: dict[str, Any]) -> str:
        step = self.step
        if behaviour.get("shell"):
            subprocess.run(["sh", "-c", behaviour["shell"]], check=True)
        if step == "analyze":
            return "The repository is small; the feature fits under src/."
        if step == "requirements":
            self.spec_file("spec.yaml")
        elif step == "research":
            self.spec_file("research.yaml")
        elif step == "plan":
            self.spec_file("plan.yaml")
            self.spec_file("tasks.yaml")
        elif step == "repair":
            self.spec_file(Path(self.arg or "").name)
        elif step == "implement":
            other = self.plan.get("after_hang_of", {}).get(self.key)
            if other:
                wait(30, hang_of=other)
            files = FILES.search(self.prompt)
            named = [f.strip() for f in (files["files"] if files else "").split(",") if f.strip()]
            if behaviour.get("hang"):
                for f in named:
                    self.append(f, f"# {self.arg} cut off\n")
                log(event="hang", key=self.key, written=self.written)
                wait(float(behaviour.get("hang_seconds", 120)), behaviour.get("until"))
                for f in named:
                    self.append(f, f"# {self.arg} woke up after being cut off\n")
            for f in named:
                self.append(f, f"# written by task {self.arg}\n")
        elif step == "fast":
            fast = self.plan.get("fast_files", {"src/fast.py": "FAST = True\n"})
            for path, content in fast.items():
                self.write(path, content)
        elif step == "revise":
            reason = self.prompt.split(REJECTED, 1)[-1].strip().splitlines()[0]
            self.append("REVISION.md", f"{reason}\n")
        elif step == "resolve":
            self.resolve()
        return f"Did {self.key}."

    def resolve(self) -> None:
        """Merge the base into the branch; keep both sides of every conflicted file."""
        merged = subprocess.run(
            ["git", "merge", "--no-edit", self.base], capture_output=True, text=True, check=False
        )
        if merged.returncode == 0:
            return
        listed = subprocess.run(
            ["git", "diff", "--name-only", "--diff-filter=U"],
            capture_output=True,
            text=True,
            check=True,
        )
        for name in listed.stdout.split():
            text = Path(name).read_text()
            kept = [
                line
                for line in text.splitlines(keepends=True)
                if not line.startswith(("<<<<<<<", "=======", ">>>>>>>"))
            ]
            self.write(name, "".join(kept))
            subprocess.run(["git", "add", name], check=True)
        subprocess.run(["git", "commit", "--no-edit", "-q"], check=True)


def wait(seconds: float, until: str | None = None, *, hang_of: str | None = None) -> None:
    """Sleep ``seconds``, or less: until the file ``until`` exists, or the log says the
    call ``hang_of`` hangs."""
    deadline = time.monotonic() + seconds
    log_path = os.environ.get("FEATURE_LOG", "")
    while time.monotonic() < deadline:
        if until and os.path.exists(until):
            return
        if hang_of and os.path.exists(log_path):
            with open(log_path) as f:
                records = [json.loads(line) for line in f if line.strip()]
            if any(r["event"] == "hang" and r["key"] == hang_of for r in records):
                return
        time.sleep(0.02)


INVALID = {
    "spec.yaml": "name: Fake feature\nnumber: oops\n",
    "research.yaml": "decisions: []\n",
    "plan.yaml": "files:\n  - path: src/x.py\n    action: create\n",
    "tasks.yaml": "tasks: []\n",
}


def main() -> int:
    if "--version" in sys.argv:
        print("2.1.197 (Claude Code)")
        return 0
    prompt = sys.stdin.read()
    plan = script()
    call = Call(prompt, plan)
    resumed = sys.argv[sys.argv.index("--resume") + 1] if "--resume" in sys.argv else None
    session = resumed or str(uuid.uuid4())
    number = bump(f"calls:{call.key}")
    behaviours = plan.get("calls", {}).get(call.key, [])
    behaviour: dict[str, Any] = behaviours[number] if number < len(behaviours) else {}
    log(
        event="start",
        key=call.key,
        step=call.step,
        arg=call.arg,
        number=number,
        prompt=prompt,
        cwd=os.getcwd(),
        resume=resumed,
    )
    emit(
        {
            "type": "system",
            "subtype": "init",
            "cwd": os.getcwd(),
            "session_id": session,
            "tools": ["Read", "Write"],
            "model": "fake-model",
            "permissionMode": "default",
        }
    )
    time.sleep(float(plan.get("sleep", {}).get(call.key, plan.get("delay", 0.01))))
    if "exit" in behaviour:
        text = f"fake agent failed on {call.key} as scripted"
        result(session, text, error=True)
        log(event="end", key=call.key, number=number, exit=behaviour["exit"], written={})
        return int(behaviour["exit"])
    text = call.act(behaviour)
    emit(
        {
            "type": "assistant",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "fake-model",
                "content": [{"type": "text", "text": text}],
                "stop_reason": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            },
            "parent_tool_use_id": None,
            "session_id": session,
        }
    )
    result(session, text)
    log(event="end", key=call.key, number=number, exit=0, written=call.written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
