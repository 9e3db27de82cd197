"""feature_specs: the spec, research, plan and tasks YAML of the feature workflow, validated."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from shep.workflows.feature_specs import (
    SIZES,
    Decision,
    Plan,
    PlanFile,
    PlanPhase,
    Research,
    Task,
    Tasks,
    dump_yaml,
    next_spec_number,
    parallel_groups,
    spec_dir_name,
    validate_plan,
    validate_research,
    validate_spec,
    validate_tasks,
)

SPEC: dict[str, Any] = {
    "name": "Add login",
    "number": 1,
    "branch": "feat/001-add-login",
    "one_liner": "Users can log in with a password",
    "summary": "A login form and a session cookie.",
    "phase": "requirements",
    "content": "# Add login\n\nUsers log in.\n",
    "technologies": ["Python"],
    "size": "S",
    "open_questions": [
        {
            "question": "Where should sessions live?",
            "options": [
                {"label": "Cookie", "description": "signed", "recommended": True},
                {"label": "Server"},
            ],
        }
    ],
}
RESEARCH: dict[str, Any] = {
    "decisions": [
        {
            "title": "Hashing",
            "chosen": "argon2",
            "rejected": ["md5", "sha1"],
            "rationale": "Memory-hard.",
        }
    ]
}
PLAN: dict[str, Any] = {
    "phases": [
        {"id": "p1", "name": "Core", "parallel": False},
        {"id": "p2", "name": "Edges", "parallel": True},
    ],
    "files": [
        {"path": "app/login.py", "action": "create"},
        {"path": "app/main.py", "action": "modify"},
    ],
}
TASKS: dict[str, Any] = {
    "tasks": [
        {
            "id": "t1",
            "title": "Login form",
            "state": "todo",
            "phase": "p1",
            "acceptance": ["a form exists"],
            "files": ["app/login.py"],
        },
        {
            "id": "t2",
            "title": "Wire it",
            "state": "done",
            "phase": "p2",
            "acceptance": ["main routes to it"],
        },
    ]
}


def write(tmp_path: Path, data: object, name: str = "file.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def with_(base: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """A deep copy of ``base`` with the dotted ``path`` set to ``value`` (``_DELETE`` removes)."""
    data: dict[str, Any] = yaml.safe_load(yaml.safe_dump(base))
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    key: Any = int(last) if last.isdigit() else last
    if value is _DELETE:
        del node[key]
    else:
        node[key] = value
    return data


_DELETE = object()


def plan_of(data: dict[str, Any] = PLAN) -> Plan:
    return Plan(
        phases=[PlanPhase(**p) for p in data["phases"]],
        files=[PlanFile(**f) for f in data["files"]],
    )


# ------------------------------------------------------------------ valid files


def test_valid_files_pass_and_are_typed(tmp_path: Path) -> None:
    """Each valid file comes back as its Struct, with defaults filled in and no errors."""
    spec, errors = validate_spec(
        write(tmp_path, SPEC), number=1, branch="feat/001-add-login", inside=tmp_path
    )
    assert errors == []
    assert spec is not None
    assert spec.open_questions[0].options[1].recommended is False
    assert spec.open_questions[0].options[1].description == ""
    research, errors = validate_research(write(tmp_path, RESEARCH), inside=tmp_path)
    assert (research, errors) == (Research(decisions=[Decision(**RESEARCH["decisions"][0])]), [])
    plan, errors = validate_plan(write(tmp_path, PLAN), inside=tmp_path)
    assert (plan, errors) == (plan_of(), [])
    assert plan is not None
    tasks, errors = validate_tasks(write(tmp_path, TASKS), plan, inside=tmp_path)
    assert errors == []
    assert tasks is not None
    assert tasks.tasks[1].files == []
    assert tasks.tasks[1].description == ""


def test_spec_without_open_questions_and_without_branch_check(tmp_path: Path) -> None:
    """An empty open_questions list is fine; without ``branch`` any non-empty branch passes."""
    spec, errors = validate_spec(
        write(tmp_path, with_(SPEC, "open_questions", [])), number=1, inside=tmp_path
    )
    assert errors == []
    assert spec is not None
    assert spec.open_questions == []


def test_yaml_12_booleans_and_no_dates(tmp_path: Path) -> None:
    """Labels like No/Yes and date-like text stay strings, as the writer meant."""
    text = textwrap.dedent(
        """\
        decisions:
          - title: 2024-01-01
            chosen: yes
            rejected: [no, off]
            rationale: on
        """
    )
    path = tmp_path / "research.yaml"
    path.write_text(text)
    research, errors = validate_research(path, inside=tmp_path)
    assert errors == []
    assert research is not None
    assert research.decisions[0] == Decision(
        title="2024-01-01", chosen="yes", rejected=["no", "off"], rationale="on"
    )


@pytest.mark.parametrize("value", ["SPEC", "RESEARCH", "PLAN"])
def test_dump_yaml_round_trips(tmp_path: Path, value: str) -> None:
    """dump_yaml writes what the validators read back unchanged (multi-line content too)."""
    path = write(tmp_path, {"SPEC": SPEC, "RESEARCH": RESEARCH, "PLAN": PLAN}[value])
    loaded: Any
    if value == "SPEC":
        loaded, _ = validate_spec(path, number=1, inside=tmp_path)
    elif value == "RESEARCH":
        loaded, _ = validate_research(path, inside=tmp_path)
    else:
        loaded, _ = validate_plan(path, inside=tmp_path)
    assert loaded is not None
    path.write_text(dump_yaml(loaded))
    again: Any
    if value == "SPEC":
        again, _ = validate_spec(path, number=1, inside=tmp_path)
        assert "content: |" in path.read_text()
    elif value == "RESEARCH":
        again, _ = validate_research(path, inside=tmp_path)
    else:
        again, _ = validate_plan(path, inside=tmp_path)
    assert again == loaded


def test_sizes() -> None:
    """The sizes, smallest first."""
    assert SIZES == ("XS", "S", "M", "L", "XL")


# -------------------------------------------------------------- failing rules

SPEC_CASES = [
    ("name", _DELETE, "name: missing required field"),
    ("name", "  ", "name: must not be empty"),
    ("number", "001", "number: expected int, got str"),
    ("number", 2, "number: is 2, but the spec directory's number is 1"),
    ("branch", "", "branch: must not be empty"),
    ("one_liner", "line one\nline two", "one_liner: must be a single line"),
    ("summary", 3, "summary: expected str, got int"),
    ("content", None, "content: expected str, got null"),
    ("technologies", "Python", "technologies: expected list, got str"),
    ("technologies", ["Python", 3], "technologies[1]: expected str, got int"),
    ("size", "XXL", "size: must be one of XS, S, M, L, XL, got 'XXL'"),
    ("size", "s", "size: must be one of XS, S, M, L, XL, got 's'"),
    ("open_questions", _DELETE, "open_questions: missing required field"),
    (
        "open_questions.0.options",
        [{"label": "Only", "recommended": True}],
        "open_questions[0].options: must offer 2 to 9 options, got 1",
    ),
    (
        "open_questions.0.options",
        [{"label": str(i), "recommended": i == 0} for i in range(10)],
        "open_questions[0].options: must offer 2 to 9 options, got 10",
    ),
    (
        "open_questions.0.options",
        [{"label": "A"}, {"label": "B"}],
        "open_questions[0].options: exactly one option must be recommended, got 0",
    ),
    (
        "open_questions.0.options",
        [{"label": "A", "recommended": True}, {"label": "B", "recommended": True}],
        "open_questions[0].options: exactly one option must be recommended, got 2",
    ),
    (
        "open_questions.0.options",
        [{"label": "A", "recommended": True}, {"label": "A"}],
        "open_questions[0].options[1]: duplicate label 'A'",
    ),
    (
        "open_questions.0.options.0.recommended",
        "true",
        "open_questions[0].options[0].recommended: expected bool, got str",
    ),
    ("open_questions.0.question", "", "open_questions[0].question: must not be empty"),
    ("open_questions.0", "why?", "open_questions[0]: expected a mapping, got str"),
]


@pytest.mark.parametrize(("field", "value", "error"), SPEC_CASES)
def test_spec_rules(tmp_path: Path, field: str, value: object, error: str) -> None:
    """Each broken spec field fails with one line naming the field path."""
    spec, errors = validate_spec(
        write(tmp_path, with_(SPEC, field, value)), number=1, inside=tmp_path
    )
    assert spec is None
    assert errors == [error]


def test_spec_branch_must_match_when_given(tmp_path: Path) -> None:
    """With ``branch``, the spec's branch must be the run's."""
    spec, errors = validate_spec(
        write(tmp_path, SPEC), number=1, branch="feat/other", inside=tmp_path
    )
    assert spec is None
    assert errors == ["branch: is 'feat/001-add-login', but the run's branch is 'feat/other'"]


def test_every_problem_is_reported(tmp_path: Path) -> None:
    """Errors are not stopped at the first: each bad field gets its own line."""
    data = with_(with_(with_(SPEC, "size", "huge"), "name", _DELETE), "one_liner", "a\nb")
    _, errors = validate_spec(write(tmp_path, data), number=1, inside=tmp_path)
    assert errors == [
        "name: missing required field",
        "one_liner: must be a single line",
        "size: must be one of XS, S, M, L, XL, got 'huge'",
    ]


RESEARCH_CASES = [
    ("decisions", [], "decisions: must not be empty"),
    ("decisions", {"a": 1}, "decisions: expected a list, got a mapping"),
    ("decisions.0.title", "", "decisions[0].title: must not be empty"),
    ("decisions.0.rejected", ["x", " "], "decisions[0].rejected[1]: must not be empty"),
    ("decisions.0.rationale", _DELETE, "decisions[0].rationale: missing required field"),
]


@pytest.mark.parametrize(("field", "value", "error"), RESEARCH_CASES)
def test_research_rules(tmp_path: Path, field: str, value: object, error: str) -> None:
    """Research needs at least one decision, each with non-empty strings."""
    research, errors = validate_research(
        write(tmp_path, with_(RESEARCH, field, value)), inside=tmp_path
    )
    assert research is None
    assert errors == [error]


PLAN_CASES = [
    ("phases", [], "phases: must not be empty"),
    (
        "phases.1.id",
        "p1",
        "phases[1]: duplicate phase id 'p1'",
    ),
    ("phases.0.parallel", "no", "phases[0].parallel: expected bool, got str"),
    ("files", [], "files: must not be empty"),
    (
        "files.0.action",
        "delete",
        "files[0].action: must be one of create, modify, got 'delete'",
    ),
    (
        "files.0.path",
        "/etc/passwd",
        "files[0].path: must be relative to the worktree, got '/etc/passwd'",
    ),
    (
        "files.0.path",
        "app/../../x.py",
        "files[0].path: must stay inside the worktree (no '..'), got 'app/../../x.py'",
    ),
    (
        "files.0.path",
        "C:\\x.py",
        "files[0].path: must be relative to the worktree, got 'C:\\\\x.py'",
    ),
    ("files.0.path", "./", "files[0].path: must name a file inside the worktree, got './'"),
    ("files.1.path", "app/login.py", "files[1]: duplicate path 'app/login.py'"),
]


@pytest.mark.parametrize(("field", "value", "error"), PLAN_CASES)
def test_plan_rules(tmp_path: Path, field: str, value: object, error: str) -> None:
    """Plan phases need unique ids; files need relative in-worktree paths and a known action."""
    plan, errors = validate_plan(write(tmp_path, with_(PLAN, field, value)), inside=tmp_path)
    assert plan is None
    assert errors == [error]


TASK_CASES = [
    ("tasks", [], "tasks: must not be empty"),
    ("tasks.1.id", "t1", "tasks[1]: duplicate task id 't1'"),
    ("tasks.1.phase", "p9", "tasks[1].phase: 'p9' is not a phase of plan.yaml (p1, p2)"),
    ("tasks.0.acceptance", [], "tasks[0].acceptance: must not be empty"),
    ("tasks.0.acceptance", [""], "tasks[0].acceptance[0]: must not be empty"),
    ("tasks.0.state", "doing", "tasks[0].state: must be one of todo, done, got 'doing'"),
    (
        "tasks.0.files",
        ["../x"],
        "tasks[0].files[0]: must stay inside the worktree (no '..'), got '../x'",
    ),
    ("tasks.0.title", _DELETE, "tasks[0].title: missing required field"),
]


@pytest.mark.parametrize(("field", "value", "error"), TASK_CASES)
def test_task_rules(tmp_path: Path, field: str, value: object, error: str) -> None:
    """Tasks need unique ids, a phase of the plan, and at least one acceptance criterion."""
    tasks, errors = validate_tasks(
        write(tmp_path, with_(TASKS, field, value)), plan_of(), inside=tmp_path
    )
    assert tasks is None
    assert errors == [error]


# ------------------------------------------------------------ whole-file errors


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("name: [unclosed\n", "spec.yaml: invalid YAML at line 2, column 1: "),
        ("- a\n- b\n", "spec.yaml: expected a mapping at the top level, got a list"),
        ("just text\n", "spec.yaml: expected a mapping at the top level, got str"),
        ("", "spec.yaml: the file is empty; expected a mapping at the top level"),
        ("\xff", None),
    ],
)
def test_file_level_problems_are_one_error(tmp_path: Path, text: str, error: str | None) -> None:
    """Invalid YAML, a non-mapping document or an empty file is a single error line."""
    path = tmp_path / "spec.yaml"
    if text == "\xff":
        path.write_bytes(b"\xff\xfe name")
    else:
        path.write_text(text)
    spec, errors = validate_spec(path, number=1, inside=tmp_path)
    assert spec is None
    assert len(errors) == 1
    assert "\n" not in errors[0]
    if error is None:
        assert errors[0].startswith("spec.yaml: cannot read the file: ")
    else:
        assert errors[0].startswith(error)


def test_missing_file_is_one_error(tmp_path: Path) -> None:
    """A file that is not there is reported, not raised."""
    assert validate_plan(tmp_path / "plan.yaml", inside=tmp_path) == (
        None,
        ["plan.yaml: file not found"],
    )
    assert validate_tasks(tmp_path / "tasks.yaml", plan_of(), inside=tmp_path) == (
        None,
        ["tasks.yaml: file not found"],
    )


def test_a_directory_is_unreadable_not_raised(tmp_path: Path) -> None:
    """A directory where the file should be is one error."""
    (tmp_path / "research.yaml").mkdir()
    research, errors = validate_research(tmp_path / "research.yaml", inside=tmp_path)
    assert research is None
    assert len(errors) == 1
    assert errors[0].startswith("research.yaml: cannot read the file")


# ------------------------------------------------------------- spec numbering


def test_spec_dir_name() -> None:
    """Three-digit number, dash, slug."""
    assert spec_dir_name(1, "add-login") == "001-add-login"
    assert spec_dir_name(42, "x") == "042-x"


def test_next_spec_number(tmp_path: Path) -> None:
    """1 with no specs; else one past the highest numbered directory (files, odd names
    ignored)."""
    assert next_spec_number(tmp_path) == 1
    specs = tmp_path / "specs"
    specs.mkdir()
    assert next_spec_number(tmp_path) == 1
    for name in ("001-a", "007-b", "notes"):
        (specs / name).mkdir()
    (specs / "099-file.md").write_text("not a directory")
    assert next_spec_number(tmp_path) == 8


# ------------------------------------------------------------ parallel groups


def task(task_id: str, phase: str, *files: str, state: str = "todo") -> Task:
    return Task(
        id=task_id,
        title=task_id,
        state=state,  # type: ignore[arg-type]
        phase=phase,
        acceptance=["ok"],
        files=list(files),
    )


def ids(groups: list[list[Task]]) -> list[list[str]]:
    return [[t.id for t in group] for group in groups]


PHASES = Plan(
    phases=[
        PlanPhase(id="p1", name="one", parallel=False),
        PlanPhase(id="p2", name="two", parallel=True),
    ],
    files=[PlanFile(path="a", action="create")],
)


def test_parallel_groups_follow_plan_order_and_disjoint_files() -> None:
    """Phases in plan order (not file order); a serial phase runs one task at a time;
    disjoint tasks of a parallel phase run together; done tasks are still returned."""
    tasks = Tasks(
        tasks=[
            task("b1", "p2", "x.py"),
            task("a1", "p1", "a.py"),
            task("b2", "p2", "y.py", state="done"),
            task("a2", "p1", "b.py"),
        ]
    )
    assert ids(parallel_groups(PHASES, tasks)) == [["a1"], ["a2"], ["b1", "b2"]]


def test_parallel_groups_split_on_shared_files_keeping_order() -> None:
    """A task sharing a file with the current group starts the next group, after it."""
    tasks = Tasks(
        tasks=[
            task("t1", "p2", "a.py", "b.py"),
            task("t2", "p2", "c.py"),
            task("t3", "p2", "./b.py"),
            task("t4", "p2", "d.py"),
            task("t5", "p2", "a.py"),
        ]
    )
    assert ids(parallel_groups(PHASES, tasks)) == [["t1", "t2"], ["t3", "t4", "t5"]]


def test_parallel_groups_tasks_without_files_run_alone() -> None:
    """A task that declares no files may touch anything: it gets a group of its own."""
    tasks = Tasks(
        tasks=[
            task("t1", "p2", "a.py"),
            task("t2", "p2"),
            task("t3", "p2", "b.py"),
            task("t4", "p2", "c.py"),
            task("t5", "p2"),
        ]
    )
    assert ids(parallel_groups(PHASES, tasks)) == [["t1"], ["t2"], ["t3", "t4"], ["t5"]]


def test_parallel_groups_empty_phases_and_unknown_phases() -> None:
    """Phases without tasks yield no group; tasks outside the plan are left out."""
    tasks = Tasks(tasks=[task("t1", "p9", "a.py"), task("t2", "p2", "a.py")])
    assert ids(parallel_groups(PHASES, tasks)) == [["t2"]]


def test_parallel_groups_take_a_plain_list_of_tasks() -> None:
    """The tasks may be given as tasks.yaml's Struct or as its list."""
    listed = [task("t1", "p2", "a.py"), task("t2", "p2", "b.py")]
    assert ids(parallel_groups(PHASES, listed)) == ids(parallel_groups(PHASES, Tasks(tasks=listed)))
    assert ids(parallel_groups(PHASES, listed)) == [["t1", "t2"]]


@pytest.mark.parametrize("linked", ["specs/001-x/spec.yaml", "specs/001-x", "specs"])
def test_a_spec_file_reached_through_a_symbolic_link_is_not_read(
    tmp_path: Path, linked: str
) -> None:
    """A spec file that is a symbolic link, or lies under one (the spec directory or
    ``specs`` itself), is one error naming the link; the file it points at is not read,
    even when it would validate.
    """
    worktree = tmp_path / "worktree"
    outside = tmp_path / "outside"
    real = outside / "specs" / "001-x"
    real.mkdir(parents=True)
    write(real, SPEC, "spec.yaml")
    if linked.endswith("spec.yaml"):
        (worktree / "specs" / "001-x").mkdir(parents=True)
        (worktree / "specs" / "001-x" / "spec.yaml").symlink_to(real / "spec.yaml")
    elif linked == "specs/001-x":
        (worktree / "specs").mkdir(parents=True)
        (worktree / "specs" / "001-x").symlink_to(real)
    else:
        worktree.mkdir()
        (worktree / "specs").symlink_to(outside / "specs")
    path = worktree / "specs" / "001-x" / "spec.yaml"
    spec, errors = validate_spec(path, number=1, inside=worktree)
    assert spec is None
    assert len(errors) == 1
    assert errors[0].startswith("spec.yaml: not read: ")
    assert f"goes through {linked}, a symbolic link" in errors[0]
