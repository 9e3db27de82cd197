"""The demo agent: a deterministic stand-in for a real agent CLI, for a first run.

It answers each analyze-repository step from fixtures after a short delay,
looking only at the file names in the repository, and says it is a demo in
every answer. It is never chosen unless asked for (``--agent demo``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

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

LABEL = "[demo agent: canned answers, not an AI]"

#: (phrase in the step's instruction, step) — the same phrases the workflow uses.
_STEPS = (
    ("Write the final analysis", "report"),
    ("Describe the architecture and code patterns", "patterns"),
    ("List the project's dependencies", "dependencies"),
    ("Describe its structure", "scan"),
)


def _files(root: Path) -> list[str]:
    skip = {".git", "node_modules", ".venv", "__pycache__"}
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not any(part in skip for part in p.relative_to(root).parts)
    )[:200]


def _answer(step: str, root: Path) -> str:
    files = _files(root)
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
            f"{LABEL}\n## Structure\n- {len(files)} files; top level: {', '.join(top)}\n"
            f"- {len(python)} Python files, {len(tests)} test files"
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
        f"## Summary\n\n{len(files)} files, {len(python)} Python, {len(tests)} tests, "
        f"manifests: {', '.join(manifests) or 'none'}.\n\n"
        "## Recommendations\n\n1. Add tests where there are none.\n"
        "2. Pin dependencies.\n3. Document how to run the project.\n"
    )


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

    def stream(self, prompt: str, options: AgentOptions) -> Iterator[AgentEvent]:
        started = time.monotonic()
        task = prompt.rsplit("Your task now", maxsplit=1)[-1]
        step = next((name for phrase, name in _STEPS if phrase in task), "scan")
        session = options.resume_session or f"demo-{uuid.uuid4()}"
        root = Path(options.cwd or ".")
        yield SessionStarted(session_id=session, model="demo")
        yield ToolUse(tool_id=f"{step}-1", name="Glob", input={"pattern": "**/*"})
        time.sleep(self.delay / 2)
        yield ToolResult(tool_id=f"{step}-1", output=f"{len(_files(root))} files", is_error=False)
        time.sleep(self.delay / 2)
        text = _answer(step, root)
        for line in text.splitlines(keepends=True):
            yield TextDelta(text=line)
        yield Completed(
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


SPEC = AgentSpec(
    type="demo",
    label="Demo agent (built in; canned answers, no AI)",
    binary="",
    install_hint="built in: nothing to install",
    token_env=(),
    verified=True,
    verified_version="built-in",
    executor=DemoExecutor,
)
