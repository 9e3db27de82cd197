"""The feature workflow's spec files, read and validated: spec, research, plan and tasks YAML.

An agent writes these files in the worktree under ``specs/NNN-slug/``; the
workflow reads them back through the ``validate_*`` functions, which never
raise on bad content. They return the typed value, or ``None`` and every
problem found, one line each, naming the field path
(``open_questions[0].options: exactly one option must be recommended``), so
the lines can go straight back to the agent in a repair prompt.

YAML is read with YAML 1.2 booleans (only ``true``/``false``) and without
implicit dates: an option labelled ``No`` or a date-like title stays a string,
as the writer meant.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Literal, TypeVar, get_args, get_origin

import msgspec
import yaml

__all__ = [
    "SIZES",
    "Decision",
    "OpenQuestion",
    "Plan",
    "PlanFile",
    "PlanPhase",
    "QuestionOption",
    "Research",
    "Spec",
    "Task",
    "Tasks",
    "dump_yaml",
    "next_spec_number",
    "parallel_groups",
    "spec_dir_name",
    "validate_plan",
    "validate_research",
    "validate_spec",
    "validate_tasks",
]

Size = Literal["XS", "S", "M", "L", "XL"]
SIZES: tuple[str, ...] = get_args(Size)
MIN_OPTIONS, MAX_OPTIONS = 2, 9


class QuestionOption(msgspec.Struct, frozen=True, kw_only=True):
    """One answer offered to an open question."""

    label: str
    description: str = ""
    recommended: bool = False


class OpenQuestion(msgspec.Struct, frozen=True, kw_only=True):
    """A question the agent needs a person to answer: 2 to 9 options, exactly one recommended."""

    question: str
    options: list[QuestionOption]


class Spec(msgspec.Struct, frozen=True, kw_only=True):
    """spec.yaml: what the feature is, and what the agent still needs to ask."""

    name: str
    number: int
    branch: str
    one_liner: str
    summary: str
    phase: str
    content: str
    technologies: list[str]
    size: Size
    open_questions: list[OpenQuestion]


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """One technical choice of research.yaml, with the alternatives it beat."""

    title: str
    chosen: str
    rejected: list[str]
    rationale: str


class Research(msgspec.Struct, frozen=True, kw_only=True):
    """research.yaml: the decisions taken before planning."""

    decisions: list[Decision]


class PlanPhase(msgspec.Struct, frozen=True, kw_only=True):
    """A phase of the plan; the tasks of a ``parallel`` phase may run side by side."""

    id: str
    name: str
    parallel: bool


class PlanFile(msgspec.Struct, frozen=True, kw_only=True):
    """A file the plan creates or modifies, relative to the worktree."""

    path: str
    action: Literal["create", "modify"]


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """plan.yaml: the phases, in order, and the files they touch."""

    phases: list[PlanPhase]
    files: list[PlanFile]


class Task(msgspec.Struct, frozen=True, kw_only=True):
    """One task of tasks.yaml. ``state`` is informative: the event log says what is done."""

    id: str
    title: str
    state: Literal["todo", "done"]
    phase: str
    acceptance: list[str]
    files: list[str] = msgspec.field(default_factory=list)
    description: str = ""


class Tasks(msgspec.Struct, frozen=True, kw_only=True):
    """tasks.yaml: the tasks, in file order."""

    tasks: list[Task]


# ---------------------------------------------------------------- reading YAML


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans and no implicit timestamps."""


_DROPPED_TAGS = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings (Markdown content) as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_yaml(value: Spec | Research | Plan | Tasks) -> str:
    """``value`` as YAML that the matching ``validate_*`` function reads back unchanged."""
    return yaml.dump(
        msgspec.to_builtins(value),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )


def _load(path: Path, inside: Path) -> tuple[Any, str | None]:
    """The YAML document at ``path`` (in the worktree ``inside``, not through a symbolic
    link: see ``shep.git.worktree.inside_worktree``), or the one-line reason it cannot be had.
    """
    from events.errors import UnsafePathError
    from shep.git.worktree import read_inside

    try:
        text = read_inside(inside, path).decode("utf-8")
    except FileNotFoundError:
        return None, f"{path.name}: file not found"
    except UnsafePathError as e:
        return None, f"{path.name}: not read: {e}"
    except (OSError, UnicodeDecodeError) as e:
        return None, f"{path.name}: cannot read the file: {e}"
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 -- _Loader is a SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return None, f"{path.name}: invalid YAML{where}: {e.problem or e.context}"
    except yaml.YAMLError as e:
        return None, f"{path.name}: invalid YAML: {' '.join(str(e).split())}"
    if data is None:
        return None, f"{path.name}: the file is empty; expected a mapping at the top level"
    if not isinstance(data, dict):
        return None, f"{path.name}: expected a mapping at the top level, got {_kind(data)}"
    return data, None


# ------------------------------------------------- converting, field by field

#: A check of one converted field: (value, field path) -> error lines.
_Check = Callable[[Any, str], list[str]]
_Checks = Mapping[tuple[type, str], _Check]
_S = TypeVar("_S", bound=msgspec.Struct)

_KINDS = {"array": "list", "object": "mapping"}


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _msgspec_error(where: str, error: msgspec.ValidationError) -> str:
    message, _, at = str(error).partition(" - at `$")
    message = re.sub(r"`(\w+)`", lambda m: _KINDS.get(m[1], m[1]), message)
    return f"{where}{at.rstrip('`')}: {message[:1].lower()}{message[1:]}"


def _convert(tp: Any, value: Any, where: str, checks: _Checks, errors: list[str]) -> Any:
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return _build(tp, value, where, checks, errors)
    if get_origin(tp) is list:
        (item,) = get_args(tp)
        if isinstance(item, type) and issubclass(item, msgspec.Struct):
            if not isinstance(value, list):
                errors.append(f"{where}: expected a list, got {_kind(value)}")
                return None
            return [
                _build(item, element, f"{where}[{i}]", checks, errors)
                for i, element in enumerate(value)
            ]
    if get_origin(tp) is Literal:
        allowed: tuple[str, ...] = get_args(tp)
        if not isinstance(value, str) or value not in allowed:
            errors.append(f"{where}: must be one of {', '.join(allowed)}, got {value!r}")
        return value
    try:
        return msgspec.convert(value, type=tp, strict=True)
    except msgspec.ValidationError as e:
        errors.append(_msgspec_error(where, e))
        return None


def _build(cls: type[_S], data: Any, path: str, checks: _Checks, errors: list[str]) -> _S | None:
    """``data`` as a ``cls``, checking every field (and its ``checks``) before giving up."""
    if not isinstance(data, dict):
        errors.append(f"{path}: expected a mapping, got {_kind(data)}")
        return None
    values: dict[str, Any] = {}
    complete = True
    for field in msgspec.structs.fields(cls):
        where = _join(path, field.name)
        if field.name not in data:
            if field.required:
                errors.append(f"{where}: missing required field")
                complete = False
            continue
        before = len(errors)
        value = _convert(field.type, data[field.name], where, checks, errors)
        if len(errors) > before:
            complete = False
            continue
        check = checks.get((cls, field.name))
        if check is not None:
            errors.extend(check(value, where))
        values[field.name] = value
    return cls(**values) if complete else None


def _read(cls: type[_S], path: Path, checks: _Checks, inside: Path) -> tuple[_S | None, list[str]]:
    data, problem = _load(Path(path), Path(inside))
    if problem is not None:
        return None, [problem]
    errors: list[str] = []
    value = _build(cls, data, "", checks, errors)
    return (value if not errors else None), errors


# ------------------------------------------------------------------- checks


def _text(value: str, where: str) -> list[str]:
    return [] if value.strip() else [f"{where}: must not be empty"]


def _one_line(value: str, where: str) -> list[str]:
    if len(value.strip().splitlines()) > 1:
        return [f"{where}: must be a single line"]
    return _text(value, where)


def _texts(values: list[str], where: str) -> list[str]:
    return [f"{where}[{i}]: must not be empty" for i, v in enumerate(values) if not v.strip()]


def _some_texts(values: list[str], where: str) -> list[str]:
    return [f"{where}: must not be empty"] if not values else _texts(values, where)


def _not_empty(values: Sequence[object], where: str) -> list[str]:
    return [] if values else [f"{where}: must not be empty"]


def _unique(values: Sequence[str], where: str, what: str) -> list[str]:
    seen: set[str] = set()
    errors = []
    for i, value in enumerate(values):
        if value in seen:
            errors.append(f"{where}[{i}]: duplicate {what} {value!r}")
        seen.add(value)
    return errors


def _path_problem(path: str) -> str | None:
    """Why ``path`` is not a file path relative to, and inside, the worktree (None: it is)."""
    if not path.strip():
        return "must not be empty"
    if path.startswith(("/", "\\")) or PureWindowsPath(path).drive:
        return f"must be relative to the worktree, got {path!r}"
    if ".." in PurePosixPath(path.replace("\\", "/")).parts:
        return f"must stay inside the worktree (no '..'), got {path!r}"
    if posixpath.normpath(path.replace("\\", "/")) == ".":
        return f"must name a file inside the worktree, got {path!r}"
    return None


def _file_paths(values: list[str], where: str) -> list[str]:
    return [
        f"{where}[{i}]: {problem}"
        for i, value in enumerate(values)
        if (problem := _path_problem(value)) is not None
    ]


def _file_path(value: str, where: str) -> list[str]:
    problem = _path_problem(value)
    return [] if problem is None else [f"{where}: {problem}"]


def _options(options: list[QuestionOption], where: str) -> list[str]:
    errors = []
    if not MIN_OPTIONS <= len(options) <= MAX_OPTIONS:
        errors.append(
            f"{where}: must offer {MIN_OPTIONS} to {MAX_OPTIONS} options, got {len(options)}"
        )
    recommended = sum(option.recommended for option in options)
    if options and recommended != 1:
        errors.append(f"{where}: exactly one option must be recommended, got {recommended}")
    return errors + _unique([option.label.strip() for option in options], where, "label")


def _equal(expected: object, what: str) -> _Check:
    def check(value: object, where: str) -> list[str]:
        if value == expected:
            return []
        return [f"{where}: is {value!r}, but {what} is {expected!r}"]

    return check


def _both(*checks: _Check) -> _Check:
    def check(value: object, where: str) -> list[str]:
        return [error for one in checks for error in one(value, where)]

    return check


_SPEC_CHECKS: dict[tuple[type, str], _Check] = {
    (Spec, "name"): _text,
    (Spec, "branch"): _text,
    (Spec, "one_liner"): _one_line,
    (Spec, "summary"): _text,
    (Spec, "phase"): _text,
    (Spec, "content"): _text,
    (Spec, "technologies"): _texts,
    (OpenQuestion, "question"): _text,
    (OpenQuestion, "options"): _options,
    (QuestionOption, "label"): _text,
}

_RESEARCH_CHECKS: dict[tuple[type, str], _Check] = {
    (Research, "decisions"): _not_empty,
    (Decision, "title"): _text,
    (Decision, "chosen"): _text,
    (Decision, "rejected"): _texts,
    (Decision, "rationale"): _text,
}

_PLAN_CHECKS: dict[tuple[type, str], _Check] = {
    (Plan, "phases"): lambda phases, where: (
        _not_empty(phases, where) + _unique([p.id for p in phases], where, "phase id")
    ),
    (Plan, "files"): lambda files, where: (
        _not_empty(files, where) + _unique([f.path for f in files], where, "path")
    ),
    (PlanPhase, "id"): _text,
    (PlanPhase, "name"): _text,
    (PlanFile, "path"): _file_path,
}


# ------------------------------------------------------------------- public


def validate_spec(
    path: Path, *, number: int, branch: str | None = None, inside: Path
) -> tuple[Spec | None, list[str]]:
    """spec.yaml at ``path``, checked against the contract; ``number`` is the NNN of its
    directory and ``branch``, when given, the run's branch. ``(spec, [])`` or ``(None, errors)``.

    ``inside``: the worktree, which the path must not leave (no symbolic link on the way),
    as for every ``validate_*`` here.
    """
    checks = dict(_SPEC_CHECKS)
    checks[Spec, "number"] = _equal(number, "the spec directory's number")
    if branch is not None:
        checks[Spec, "branch"] = _both(_text, _equal(branch, "the run's branch"))
    return _read(Spec, path, checks, inside)


def validate_research(path: Path, *, inside: Path) -> tuple[Research | None, list[str]]:
    """research.yaml at ``path``: ``(research, [])`` or ``(None, errors)``."""
    return _read(Research, path, _RESEARCH_CHECKS, inside)


def validate_plan(path: Path, *, inside: Path) -> tuple[Plan | None, list[str]]:
    """plan.yaml at ``path``: ``(plan, [])`` or ``(None, errors)``."""
    return _read(Plan, path, _PLAN_CHECKS, inside)


def validate_tasks(path: Path, plan: Plan, *, inside: Path) -> tuple[Tasks | None, list[str]]:
    """tasks.yaml at ``path``, whose tasks must belong to ``plan``'s phases:
    ``(tasks, [])`` or ``(None, errors)``.
    """
    phase_ids = [phase.id for phase in plan.phases]

    def in_plan(value: str, where: str) -> list[str]:
        if value in phase_ids:
            return []
        return [f"{where}: {value!r} is not a phase of plan.yaml ({', '.join(phase_ids)})"]

    checks: dict[tuple[type, str], _Check] = {
        (Tasks, "tasks"): lambda tasks, where: (
            _not_empty(tasks, where) + _unique([t.id for t in tasks], where, "task id")
        ),
        (Task, "id"): _text,
        (Task, "title"): _text,
        (Task, "phase"): in_plan,
        (Task, "acceptance"): _some_texts,
        (Task, "files"): _file_paths,
    }
    return _read(Tasks, path, checks, inside)


def spec_dir_name(number: int, slug: str) -> str:
    """The spec directory's name: ``spec_dir_name(1, "add-login") == "001-add-login"``."""
    return f"{number:03d}-{slug}"


_NUMBERED = re.compile(r"^(\d+)-")


def next_spec_number(worktree: Path) -> int:
    """One more than the highest ``NNN`` of the directories under ``worktree/specs``; 1 if none."""
    specs = Path(worktree) / "specs"
    numbers = [
        int(match[1])
        for entry in (specs.iterdir() if specs.is_dir() else ())
        if entry.is_dir() and (match := _NUMBERED.match(entry.name))
    ]
    return max(numbers, default=0) + 1


def parallel_groups(plan: Plan, tasks: Tasks | Sequence[Task]) -> list[list[Task]]:
    """The tasks in the order to run them: groups in sequence, each group's tasks side by side.

    Phases come in plan order and tasks in file order. In a ``parallel`` phase,
    consecutive tasks share a group while their declared files are pairwise
    disjoint; a task that touches a file of the current group starts the next
    one, so a later task still sees the earlier one's changes. A task that
    declares no files may touch anything and runs alone, as does every task of
    a phase that is not parallel. ``tasks`` is tasks.yaml or its list of tasks.
    Tasks are returned whatever their ``state``
    (the runtime knows from the event log what is done); a task whose phase is
    not in the plan is left out (``validate_tasks`` rejects those).
    """
    listed = tasks.tasks if isinstance(tasks, Tasks) else tasks
    groups: list[list[Task]] = []
    for phase in plan.phases:
        members = [task for task in listed if task.phase == phase.id]
        if not phase.parallel:
            groups.extend([task] for task in members)
            continue
        group: list[Task] = []
        claimed: set[str] = set()
        for task in members:
            files = {posixpath.normpath(f.replace("\\", "/")) for f in task.files}
            if group and (not files or files & claimed):
                groups.append(group)
                group, claimed = [], set()
            group.append(task)
            claimed |= files
            if not files:
                groups.append(group)
                group, claimed = [], set()
        if group:
            groups.append(group)
    return groups
