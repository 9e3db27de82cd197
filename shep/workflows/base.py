"""What a workflow is: named agent steps wired into a LangGraph graph.

Workflow code is deterministic: the clock, ids and the agent are injected by
the runner through ``StepRunner``; routers are pure functions of the state.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

if TYPE_CHECKING:
    from langgraph.graph.state import StateGraph

#: Tool names per agent type for read-only analysis and for writing. Executors
#: without tool scoping drop them (codex maps them to its sandbox mode).
READ_TOOLS: Mapping[str, tuple[str, ...]] = {
    "claude-code": ("Read", "Glob", "Grep", "LS"),
    "gemini-cli": ("read_file", "read_many_files", "list_directory", "glob", "search_file_content"),
    "qwen-code": ("read_file", "read_many_files", "list_directory", "glob", "search_file_content"),
}
WRITE_TOOLS: Mapping[str, tuple[str, ...]] = {
    "claude-code": ("Write", "Edit"),
    "gemini-cli": ("write_file", "replace"),
    "qwen-code": ("write_file", "replace"),
}
_DEFAULT_READ = ("Read", "Glob", "Grep")
_DEFAULT_WRITE = ("Write", "Edit")


def tools_for(agent_type: str, *, write: bool) -> tuple[str, ...]:
    """The agent's own names for read-only tools, plus write tools when ``write``."""
    read = READ_TOOLS.get(agent_type, _DEFAULT_READ)
    return read + WRITE_TOOLS.get(agent_type, _DEFAULT_WRITE) if write else read


class WorkflowState(TypedDict, total=False):
    """The graph's state: the repository, each step's result, the agent session to continue."""

    repo: str
    inputs: dict[str, str]
    results: Annotated[dict[str, str], operator.or_]
    session_id: str | None


@dataclass(frozen=True)
class AgentStep:
    """One node that asks the agent to do something.

    ``instruction`` is formatted with ``repo``, ``repo_name``, ``tree`` and the
    run's inputs. ``writes`` gives the step write tools; analysis steps read only.
    ``artifact`` names a file the runner writes into the repository from the
    step's result when the agent did not write it itself.
    """

    name: str
    title: str
    instruction: str
    writes: bool = False
    artifact: str | None = None


@dataclass(frozen=True)
class Workflow:
    """A named, described sequence of agent steps."""

    name: str
    description: str
    steps: tuple[AgentStep, ...]
    inputs: Mapping[str, str] = field(default_factory=dict)

    @property
    def node_names(self) -> list[str]:
        return [step.name for step in self.steps]

    def build(self, run_step: StepRunner) -> StateGraph[WorkflowState, Any, Any, Any]:
        """A linear graph: each step's node calls ``run_step(step, state)``."""
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import RetryPolicy

        from shep.errors import AgentError

        def retryable(error: Exception) -> bool:
            return isinstance(error, AgentError) and error.retryable

        graph: StateGraph[WorkflowState, Any, Any, Any] = StateGraph(WorkflowState)
        previous = START
        for step in self.steps:
            # langgraph's overloads want a protocol with a named `state` parameter.
            graph.add_node(  # type: ignore[call-overload]
                step.name,
                _node(step, run_step),
                retry_policy=RetryPolicy(
                    max_attempts=3, initial_interval=2.0, jitter=True, retry_on=retryable
                ),
            )
            graph.add_edge(previous, step.name)
            previous = step.name
        graph.add_edge(previous, END)
        return graph


StepRunner = Callable[[AgentStep, WorkflowState], dict[str, Any]]


def _node(step: AgentStep, run_step: StepRunner) -> Callable[[WorkflowState], dict[str, Any]]:
    def node(state: WorkflowState) -> dict[str, Any]:
        return run_step(step, state)

    node.__name__ = step.name.replace("-", "_")
    return node


def repository_tree(repo: Path, *, limit: int = 300) -> str:
    """A short listing of the repository's files (skipping VCS and dependency folders).

    It goes into the first prompt so that even an agent that cannot read files
    knows what the repository holds.
    """
    skip = {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        "dist",
        "build",
        ".tox",
        ".idea",
        ".vscode",
    }
    lines: list[str] = []
    for path in sorted(repo.rglob("*")):
        relative = path.relative_to(repo)
        if any(part in skip for part in relative.parts):
            continue
        if path.is_file():
            lines.append(str(relative))
            if len(lines) >= limit:
                lines.append("... (more files not listed)")
                break
    return "\n".join(lines) or "(empty repository)"
