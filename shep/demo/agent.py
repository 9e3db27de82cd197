"""The demo agent: a deterministic stand-in for a real agent CLI, for a first run.

It answers each analyze-repository step from fixtures after a short delay,
looking only at the file names in the repository, and says it is a demo in
every answer. Prompts of the feature workflow (a ``[shep feature: STEP]``
line) it answers by writing, in its working directory, the files a real agent
would: the spec YAML files, each task's declared files, a note for ``--fast``.
It is never chosen unless asked for (``--agent demo``).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from events.errors import AgentTimeoutError
from events.inbox_status import ItemKind
from events.words import counted
from shep.agents.model import (
    AgentEvent,
    AgentOptions,
    AgentResult,
    AgentUsage,
    Completed,
    SessionStarted,
    TextDelta,
    ToolResult,
    ToolUse,
)
from shep.agents.spec import AgentSpec
from shep.demo import LABEL
from shep.demo.feature_answers import feature_answer, feature_request, repo_files

#: (phrase in the step's instruction, step) — the same phrases the workflow uses.
_STEPS = (
    ("Write the final analysis", "report"),
    ("Describe the architecture and code patterns", "patterns"),
    ("List the project's dependencies", "dependencies"),
    ("Describe its structure", "scan"),
)


def _answer(step: str, root: Path) -> str:
    files = repo_files(root)
    python = [f for f in files if f.endswith(".py")]
    tests = [f for f in files if "test" in f]
    manifests = [
        f
        for f in files
        if Path(f).name
        in ("pyproject.toml", "package.json", "requirements.txt", "go.mod", "Cargo.toml")
    ]
    if step == "scan":
        top = sorted({f.split("/")[0] for f in files})
        return (
            f"{LABEL}\n## Structure\n- {counted(len(files), 'file')}; top level: {', '.join(top)}\n"
            f"- {counted(len(python), 'Python file')}, {counted(len(tests), 'test file')}"
        )
    if step == "dependencies":
        listed = ", ".join(manifests) or "no manifest found"
        return f"{LABEL}\n## Dependencies\n- Declared in: {listed}\n- Pin versions in a lock file."
    if step == "patterns":
        return (
            f"{LABEL}\n## Patterns\n- Tests {'present' if tests else 'missing'}\n"
            "- Keep modules small and errors explicit."
        )
    return (
        f"# Repository analysis: {root.name}\n\n"
        f"> Written by shep's demo agent ({LABEL}). Configure a real agent with "
        "`shep settings agent` for a real analysis.\n\n"
        f"## Summary\n\n{counted(len(files), 'file')}, {len(python)} Python, "
        f"{counted(len(tests), 'test')}, "
        f"manifests: {', '.join(manifests) or 'none'}.\n\n"
        "## Recommendations\n\n1. Add tests where there are none.\n"
        "2. Pin dependencies.\n3. Document how to run the project.\n"
    )


# ------------------------------------------------------------- the feature workflow
# feature_specs is imported inside the functions, not at the top: shep.workflows imports
# its registered workflows, which import the agent registry, which imports this module.


class DemoExecutor:
    """Answers from fixtures; streams like a real agent (session, tool use, text, result)."""

    def __init__(
        self,
        spec: AgentSpec,
        *,
        token: str | None = None,
        binary: str | None = None,
        env: Mapping[str, str] | None = None,
        limits: Any = None,
    ) -> None:
        self.name = spec.type
        self.delay = float(
            (env or {}).get("SHEP_DEMO_DELAY", os.environ.get("SHEP_DEMO_DELAY", "0.4"))
        )

    def supports(self, feature: str) -> bool:
        return feature in ("session-resume", "streaming")

    def execute(self, prompt: str, options: AgentOptions) -> AgentResult:
        for event in self.stream(prompt, options):
            if isinstance(event, Completed):
                return event.result
        raise AssertionError("the demo stream always completes")

    def _pause(self, started: float, options: AgentOptions) -> None:
        """Half the delay, as a real agent's call takes time, bounded by ``--timeout`` as a
        real agent's is: past it, ``AgentTimeoutError``."""
        if options.timeout is not None and time.monotonic() + self.delay / 2 > (
            started + options.timeout
        ):
            time.sleep(max(0.0, started + options.timeout - time.monotonic()))
            raise AgentTimeoutError(
                f"{self.name} did not finish within {options.timeout:g} s; shep stopped it. "
                "Raise the timeout or split the task.",
                agent=self.name,
            )
        time.sleep(self.delay / 2)

    def stream(self, prompt: str, options: AgentOptions) -> Iterator[AgentEvent]:
        started = time.monotonic()
        verdict = _supervisor_answer(prompt)
        if verdict is not None:
            yield from self._reply(prompt, verdict, options, started)
            return
        request = feature_request(prompt)
        if request is None:
            task = prompt.rsplit("Your task now", maxsplit=1)[-1]
            step = next((name for phrase, name in _STEPS if phrase in task), "scan")
        else:
            step = request.step
        session = options.resume_session or f"demo-{uuid.uuid4()}"
        root = Path(options.cwd or ".")
        yield SessionStarted(session_id=session, model="demo")
        yield ToolUse(tool_id=f"{step}-1", name="Glob", input={"pattern": "**/*"})
        self._pause(started, options)
        found = counted(len(repo_files(root)), "file")
        yield ToolResult(tool_id=f"{step}-1", output=found, is_error=False)
        self._pause(started, options)
        writes: list[tuple[str, str]] = []
        if request is None:
            text = _answer(step, root)
        else:
            writes, text = feature_answer(request, root)
        for number, (relative, content) in enumerate(writes, start=2):
            tool_id = f"{step}-{number}"
            yield ToolUse(tool_id=tool_id, name="Write", input={"file_path": relative})
            yield _write(root, relative, content, tool_id)
        for line in text.splitlines(keepends=True):
            yield TextDelta(text=line)
        yield _completed(prompt, text, session, started)

    def _reply(
        self, prompt: str, text: str, options: AgentOptions, started: float
    ) -> Iterator[AgentEvent]:
        session = options.resume_session or f"demo-{uuid.uuid4()}"
        yield SessionStarted(session_id=session, model="demo")
        self._pause(started, options)
        yield TextDelta(text=text)
        yield _completed(prompt, text, session, started)


def _completed(prompt: str, text: str, session: str, started: float) -> Completed:
    return Completed(
        result=AgentResult(
            text=text,
            session_id=session,
            usage=AgentUsage(
                input_tokens=len(prompt) // 4, output_tokens=len(text) // 4, cost_usd=0.0
            ),
            turns=1,
            duration_ms=int((time.monotonic() - started) * 1000),
            structured_output=None,
            raw={"demo": True},
        )
    )


_FENCED = re.compile(r"<<<UNTRUSTED-(\w+)\n(.*)\nUNTRUSTED-\1>>>", re.DOTALL)


def _supervisor_answer(prompt: str) -> str | None:
    """The supervisor's prompt gets a canned verdict: the recommended option, or approve."""
    if not prompt.startswith("You are shep's supervisor"):
        return None
    match = _FENCED.search(prompt)
    try:
        item = json.loads(match.group(2))["item"] if match else {}
    except (ValueError, KeyError, TypeError):
        item = {}
    if item.get("kind") == ItemKind.QUESTION:
        options = item.get("options") or []
        chosen = next((o for o in options if o.get("recommended")), options[0] if options else None)
        if chosen is None:
            return json.dumps({"verdict": "escalate", "rationale": f"{LABEL} no option to pick"})
        return json.dumps(
            {
                "verdict": "answer",
                "answer": chosen["id"],
                "rationale": f"{LABEL} picks the recommended option",
                "confidence": 0.5,
            }
        )
    return json.dumps(
        {
            "verdict": "approve",
            "rationale": f"{LABEL} approves every gate its guardrails let through",
            "confidence": 0.5,
        }
    )


def _write(root: Path, relative: str, content: str, tool_id: str) -> ToolResult:
    """Write one file as an agent's Write tool would, refusing paths outside ``root``."""
    target = (root / relative).resolve()
    if not target.is_relative_to(root.resolve()):
        return ToolResult(
            tool_id=tool_id, output=f"refused: {relative} is outside the worktree", is_error=True
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    except OSError as e:
        return ToolResult(tool_id=tool_id, output=f"cannot write {relative}: {e}", is_error=True)
    return ToolResult(
        tool_id=tool_id, output=f"wrote {relative} ({len(content.encode())} bytes)", is_error=False
    )
