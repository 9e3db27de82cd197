"""What a workflow is: a LangGraph graph declared from four kinds of node.

- an **agent step** asks the configured agent to do something;
- a **deterministic step** is plain Python on the state and the repository
  (validate a file, snapshot, merge);
- a **question** asks a person, with 2 to 9 options, one recommended;
- an **approval gate** asks a person to approve what a phase produced; a
  rejection sends the run back to that phase with the reason.

A workflow's ``build`` wires nodes made by a ``NodeKit`` (the runtime's; tests
can bring their own) into a ``StateGraph`` over its own state type, with
pure routers. Workflow code is deterministic: the clock, ids and the agent
are the runtime's. Building imports langgraph; declaring and listing do not.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypedDict

from events.inbox import GATE
from events.inbox_status import ItemStatus

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


def tools_for(agent_type: str, *, write: bool, only: bool = False) -> tuple[str, ...]:
    """The agent's own names for read-only tools, plus write tools when ``write``;
    ``only``: the write tools alone.
    """
    writes = WRITE_TOOLS.get(agent_type, _DEFAULT_WRITE)
    if only:
        return writes
    read = READ_TOOLS.get(agent_type, _DEFAULT_READ)
    return read + writes if write else read


class StepState(TypedDict, total=False):
    """The keys the node kinds read and write; each workflow's state type extends it.

    ``results`` holds each agent step's answer, ``iterations`` how many times
    each node has completed (loops count), ``feedback`` the latest rejection
    reason per phase, ``answers`` each question's answer, ``verdicts`` each
    gate's latest verdict (``approved`` / ``rejected``).
    """

    repo: str
    inputs: dict[str, str]
    results: Annotated[dict[str, str], operator.or_]
    session_id: str | None
    iterations: Annotated[dict[str, int], operator.or_]
    feedback: Annotated[dict[str, str], operator.or_]
    answers: Annotated[dict[str, str], operator.or_]
    verdicts: Annotated[dict[str, str], operator.or_]


#: What a node function takes and returns: the state, and the update it makes.
NodeFn = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class AgentStep:
    """A node that asks the agent to do something.

    ``instruction`` is formatted with ``repo``, ``repo_name``, ``tree`` and the
    run's inputs. ``writes`` gives the step write tools; analysis steps read only.
    ``artifact`` names a file the runtime writes into the repository from the
    step's result when the agent did not write it itself. A rejection reason
    for this step (``feedback``) is added to its prompt.
    """

    name: str
    title: str
    instruction: str
    writes: bool = False
    artifact: str | None = None
    #: Builds the instruction from the state instead (it is formatted all the same).
    prompt: Callable[[Mapping[str, Any]], str] | None = None
    #: The write tools only (a repair that must not wander): implies ``writes``.
    write_only: bool = False
    max_turns: int | None = None


class StepIO(Protocol):
    """What a deterministic step may do besides computing its update: the runtime's, recorded.

    ``record`` queues an event to commit with the step's completion (it happens
    exactly when the step's result is saved); ``append`` commits one at once
    (for what must be known even if the worker dies next: a task finished, a
    merge made). ``agent`` asks the configured agent, its output recorded under
    the step's node. ``snapshot`` commits the repository's files to a private
    ref and returns the commit (None outside git). ``attempt`` counts this
    node's executions in this iteration (2 and up: it failed or was cut off
    before); ``history(*types)`` is the run's events so far (of those types only, if given:
    a run's stream also holds its output and checkpoints).
    """

    repo: Path
    run_id: str
    inputs: Mapping[str, str]
    iteration: int
    attempt: int

    def record(self, event_type: type[Any], **fields: Any) -> None: ...

    def append(self, event_type: type[Any], **fields: Any) -> None: ...

    def agent(self, prompt: str, *, writes: bool, label: str = "") -> Any: ...

    def snapshot(self, label: str) -> str | None: ...

    def message(self, text: str) -> None: ...

    def history(self, *types: type[Any]) -> list[Any]: ...

    def setting(self, key: str) -> Any: ...


@dataclass(frozen=True)
class DeterministicStep:
    """A node of plain Python: ``run(state, io)`` returns the state update.

    It must be deterministic given the state, the repository and the log, and
    may read and write the repository (``io.repo``). Raise ``StepFailedError``
    to fail the run with a message for the user. ``writes``: the step may
    change files, so its completion records a snapshot of them.
    """

    name: str
    title: str
    run: Callable[[Mapping[str, Any], StepIO], dict[str, Any]]
    writes: bool = False


@dataclass(frozen=True)
class Option:
    """One answer a question offers."""

    id: str
    label: str
    description: str = ""
    recommended: bool = False


@dataclass(frozen=True)
class Question:
    """What a question node asks: 2 to 9 options, exactly one recommended.

    ``default_after`` (seconds): after that long unanswered, the recommended
    option is applied (by ``system:deadline``). Free text is always allowed.
    """

    text: str
    options: tuple[Option, ...]
    context: str = ""
    default_after: float | None = None

    def __post_init__(self) -> None:
        if not 2 <= len(self.options) <= 9:
            raise ValueError(f"a question has 2 to 9 options, not {len(self.options)}")
        if sum(o.recommended for o in self.options) != 1:
            raise ValueError("exactly one option of a question is recommended")
        ids = [o.id for o in self.options]
        if len(set(ids)) != len(ids):
            raise ValueError(f"option ids repeat: {ids}")


@dataclass(frozen=True)
class QuestionStep:
    """A node that asks a person ``ask(state)``; the answer lands in ``answers[name]``."""

    name: str
    title: str
    ask: Callable[[Mapping[str, Any]], Question]
    #: More of the state to update with the answer: ``record(state, answer, option_id)``
    #: (``option_id`` None for a free-text answer).
    record: Callable[[Mapping[str, Any], str, str | None], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Approval:
    """What a gate asks to approve: a short summary and the files (relative to the repo).

    ``hashed``: what else it approves, already hashed by the step that made it (the
    diff to merge, the test result): ``(kind, path, sha256)`` as ``ArtifactRef`` has them.
    """

    summary: str
    artifacts: tuple[str, ...] = ()
    hashed: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class ApprovalGate:
    """A node that asks a person to approve what ``phase`` produced.

    Approved: ``verdicts[name]`` is ``approved``. Rejected: it is ``rejected``
    and ``feedback[phase]`` holds the reason; route back to ``phase`` with
    ``route_gate``. A gate never approves itself.
    """

    name: str
    title: str
    phase: str
    approval: Callable[[Mapping[str, Any]], Approval]
    #: What a supervisor policy calls this gate (``ITEM_KINDS``; ``gate``: no kind of its own).
    kind: str = GATE


Step = AgentStep | DeterministicStep | QuestionStep | ApprovalGate


class NodeKit(Protocol):
    """Makes node functions of each kind; the runtime's records what they do."""

    def agent(self, step: AgentStep) -> NodeFn: ...

    def deterministic(self, step: DeterministicStep) -> NodeFn: ...

    def question(self, step: QuestionStep) -> NodeFn: ...

    def gate(self, step: ApprovalGate) -> NodeFn: ...


def add_step(graph: StateGraph[Any, Any, Any, Any], kit: NodeKit, step: Step) -> None:
    """Add ``step`` as a node of its kind; agent steps retry the agent's retryable errors."""
    from langgraph.types import RetryPolicy

    from events.errors import AgentError

    def retryable(error: Exception) -> bool:
        return isinstance(error, AgentError) and error.retryable

    if isinstance(step, AgentStep):
        # langgraph's overloads want a protocol with a named `state` parameter.
        graph.add_node(  # type: ignore[call-overload]
            step.name,
            kit.agent(step),
            retry_policy=RetryPolicy(
                max_attempts=3, initial_interval=2.0, jitter=True, retry_on=retryable
            ),
        )
    elif isinstance(step, DeterministicStep):
        graph.add_node(step.name, kit.deterministic(step))  # type: ignore[call-overload]
    elif isinstance(step, QuestionStep):
        graph.add_node(step.name, kit.question(step))  # type: ignore[call-overload]
    else:
        graph.add_node(step.name, kit.gate(step))  # type: ignore[call-overload]


def route_gate(gate: ApprovalGate, approved: str) -> Callable[[Mapping[str, Any]], str]:
    """A router after ``gate``: to ``approved`` when approved, back to its phase when rejected."""

    def route(state: Mapping[str, Any]) -> str:
        verdict = (state.get("verdicts") or {}).get(gate.name)
        return gate.phase if verdict == ItemStatus.REJECTED else approved

    route.__name__ = f"after_{gate.name}".replace("-", "_")
    return route


@dataclass(frozen=True)
class Migration:
    """How a run started under an older version of a workflow goes on under this one.

    ``renamed``: an old node's new name. ``removed``: a node that is gone, and the
    node a run about to enter it continues at instead. ``defaults``: state keys
    this version added, with the value a run that lacks them gets. Applied to the
    run's last checkpoint when it resumes (see ``shep.runs.pin``), and recorded.
    """

    renamed: Mapping[str, str] = field(default_factory=dict)
    removed: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Workflow:
    """A named, described graph of steps.

    ``phases`` are the nodes that count for progress (``N/M``: phases done of
    phases known), in order. ``build(kit)`` returns the uncompiled graph.
    ``linear(steps)`` builds the common case: the steps one after another.

    ``version`` names this form of the graph: a run records it (and the graph's
    fingerprint) when it starts, and goes on under a changed graph only through
    the ``migrations`` declared from its version (keyed by that older version).
    """

    name: str
    description: str
    steps: tuple[Step, ...]
    build: Callable[[NodeKit], StateGraph[Any, Any, Any, Any]]
    inputs: Mapping[str, str] = field(default_factory=dict)
    phases: tuple[str, ...] = ()
    #: The phase each other node belongs to (a validator, a gate, a question of that phase);
    #: a node in neither belongs to the phase the run is in when it runs (see ``phase``).
    phase_of: Mapping[str, str] = field(default_factory=dict)
    version: str = "1"
    migrations: Mapping[str, Migration] = field(default_factory=dict)

    @property
    def node_names(self) -> list[str]:
        """The phases (every step's name unless the workflow says otherwise)."""
        return list(self.phases) if self.phases else [step.name for step in self.steps]

    def phase(self, node: str, within: str | None = None) -> str:
        """The phase ``node`` counts for: itself when it is one; the phase declared for it
        in ``phase_of``; else ``within``, the phase the run is in when it gets there (a
        repair or give-up step serves the phase whose file it fixes); else itself.
        """
        if node in self.node_names:
            return node
        return self.phase_of.get(node) or within or node

    def step(self, name: str) -> Step:
        """The step named ``name``."""
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)


def linear(steps: tuple[Step, ...], state: type[Any] = StepState) -> Callable[[NodeKit], Any]:
    """A ``build`` that runs ``steps`` in order, START to END."""

    def build(kit: NodeKit) -> StateGraph[Any, Any, Any, Any]:
        from langgraph.graph import END, START, StateGraph

        graph: StateGraph[Any, Any, Any, Any] = StateGraph(state)
        previous = START
        for step in steps:
            add_step(graph, kit, step)
            graph.add_edge(previous, step.name)
            previous = step.name
        graph.add_edge(previous, END)
        return graph

    return build


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
