"""The demo agent answers every step of the feature workflow by writing valid files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shep.agents.model import (
    AgentOptions,
    Completed,
    SessionStarted,
    TextDelta,
    ToolResult,
    ToolUse,
)
from shep.agents.registry import DEMO as SPEC
from shep.demo import LABEL
from shep.demo.agent import DemoExecutor
from shep.workflows.feature_specs import (
    parallel_groups,
    validate_plan,
    validate_research,
    validate_spec,
    validate_tasks,
)

SPEC_DIR = "specs/001-add-login"
BRANCH = "feat/001-add-login"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small Python repository on its own branch, as a feature worktree is."""
    root = tmp_path / "repo"
    (root / "app").mkdir(parents=True)
    (root / "app" / "main.py").write_text("print('hi')\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_main.py").write_text("def test_ok() -> None:\n    pass\n")
    (root / "README.md").write_text("# app\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", BRANCH], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)
    return root


def demo() -> DemoExecutor:
    return DemoExecutor(SPEC, env={"SHEP_DEMO_DELAY": "0"})


def prompt(step: str, *extra: str, feature: str = "Add login with a password") -> str:
    return "\n".join(
        [
            f"[shep feature: {step}]",
            f"Feature: {feature}",
            f"Spec directory: {SPEC_DIR}",
            "Branch: feat/from-the-prompt (based on main)",
            "",
            "Do the step.",
            *extra,
        ]
    )


def run(root: Path, text: str) -> str:
    return demo().execute(text, AgentOptions(cwd=str(root))).text


def requirements(root: Path, *extra: str) -> None:
    run(root, prompt("requirements", *extra))


def changed(root: Path) -> list[str]:
    """The worktree's new and changed files, as git sees them."""
    status = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "-uall"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(line[3:] for line in status.splitlines())


def plan_files(root: Path) -> None:
    requirements(root)
    run(root, prompt("research"))
    run(root, prompt("plan"))


# ----------------------------------------------------------------------- steps


def test_analyze_describes_the_repository_and_writes_nothing(repo: Path) -> None:
    """analyze replies with a short description and leaves the worktree alone."""
    text = run(repo, prompt("analyze"))
    assert text.startswith(LABEL)
    assert "Python" in text
    assert "Tests present" in text
    assert changed(repo) == []


def test_requirements_without_answers_ask_one_question(repo: Path) -> None:
    """A first requirements pass writes a valid spec with one open question, one option
    recommended, on the worktree's branch (git's, not the prompt's)."""
    requirements(repo)
    spec, errors = validate_spec(
        repo / SPEC_DIR / "spec.yaml", number=1, branch=BRANCH, inside=repo
    )
    assert errors == []
    assert spec is not None
    assert spec.name == "Add login with a password"
    assert spec.size == "S"
    assert spec.phase == "requirements"
    assert "Python" in spec.technologies
    assert "Markdown" in spec.technologies
    [question] = spec.open_questions
    assert question.question == "Where should the feature's code live?"
    assert 2 <= len(question.options) <= 3
    assert sum(o.recommended for o in question.options) == 1


def test_requirements_with_answers_ask_nothing_and_use_them(repo: Path) -> None:
    """With answers in the prompt, the spec has no open questions and mentions the answers."""
    requirements(
        repo,
        "Answers to your open questions:",
        "- Where should the feature's code live?: A new directory",
        "Take them into account; ask only what is still open.",
    )
    spec, errors = validate_spec(
        repo / SPEC_DIR / "spec.yaml", number=1, branch=BRANCH, inside=repo
    )
    assert errors == []
    assert spec is not None
    assert spec.open_questions == []
    assert "- Where should the feature's code live?: A new directory" in spec.content
    assert "Take them" not in spec.content


def test_requirements_outside_git_uses_the_prompts_branch(tmp_path: Path) -> None:
    """Without git, the branch comes from the prompt's Branch line; the number from the
    spec directory's name."""
    run(tmp_path, prompt("requirements").replace("001-add-login", "007-add-login"))
    path = tmp_path / "specs/007-add-login/spec.yaml"
    spec, errors = validate_spec(path, number=7, branch="feat/from-the-prompt", inside=tmp_path)
    assert errors == []
    assert spec is not None


def test_research_plan_and_tasks_validate(repo: Path) -> None:
    """research.yaml has decisions; plan.yaml and tasks.yaml fit together: a serial phase
    with one task, then a parallel phase whose two tasks run side by side."""
    plan_files(repo)
    research, errors = validate_research(repo / SPEC_DIR / "research.yaml", inside=repo)
    assert errors == []
    assert research is not None
    assert 1 <= len(research.decisions) <= 2
    plan, errors = validate_plan(repo / SPEC_DIR / "plan.yaml", inside=repo)
    assert errors == []
    assert plan is not None
    assert [(p.id, p.parallel) for p in plan.phases] == [("p1", False), ("p2", True)]
    tasks, errors = validate_tasks(repo / SPEC_DIR / "tasks.yaml", plan, inside=repo)
    assert errors == []
    assert tasks is not None
    assert [[t.id for t in group] for group in parallel_groups(plan, tasks)] == [
        ["t1"],
        ["t2", "t3"],
    ]
    task_files = [f for t in tasks.tasks for f in t.files]
    assert [(f.path, f.action) for f in plan.files] == [(f, "create") for f in task_files]
    assert all(f.startswith("feature/add_login/") and f.endswith(".py") for f in task_files)
    assert not any((repo / f).exists() for f in task_files)


def test_plan_follows_the_repositorys_main_language(tmp_path: Path) -> None:
    """In a TypeScript repository the planned files are TypeScript."""
    (tmp_path / "src").mkdir()
    for name in ("a.ts", "b.ts", "c.ts"):
        (tmp_path / "src" / name).write_text("export {};\n")
    run(tmp_path, prompt("plan"))
    plan, errors = validate_plan(tmp_path / SPEC_DIR / "plan.yaml", inside=tmp_path)
    assert errors == []
    assert plan is not None
    assert [f.path for f in plan.files] == [
        "feature/add-login/core.ts",
        "feature/add-login/cli.ts",
        "feature/add-login/core.test.ts",
    ]


def test_implement_writes_exactly_the_listed_files(repo: Path) -> None:
    """implement task=ID writes each file of the Files line, naming the task and feature,
    and nothing else."""
    files = ["feature/add_login/cli.py", "feature/add_login/test_add_login.py", "docs/login.md"]
    text = run(
        repo,
        prompt(
            "implement task=t2",
            "Implement task t2: Add the command-line entry",
            f"Files: {', '.join(files)}",
            "Acceptance:",
            "- it works",
        ),
    )
    assert text.startswith(LABEL)
    assert changed(repo) == sorted(files)
    for name in files:
        body = (repo / name).read_text()
        assert "t2" in body
        assert "Add login with a password" in body
    compile((repo / files[0]).read_text(), files[0], "exec")
    test_source = (repo / files[1]).read_text()
    assert "def test_t2_names_the_feature() -> None:" in test_source


def test_implement_is_deterministic(repo: Path, tmp_path: Path) -> None:
    """The same prompt writes the same bytes (no clock, no randomness in contents)."""
    text = prompt("implement task=t1", "Files: feature/add_login/core.py", "Acceptance:", "- ok")
    run(repo, text)
    first = (repo / "feature/add_login/core.py").read_bytes()
    other = tmp_path / "other"
    other.mkdir()
    run(other, text)
    assert (other / "feature/add_login/core.py").read_bytes() == first


def test_implement_refuses_paths_outside_the_worktree(repo: Path) -> None:
    """A declared file outside the worktree is a failed Write, not a write."""
    events = list(
        demo().stream(
            prompt("implement task=t1", "Files: ../escape.py, ok.py", "Acceptance:", "- ok"),
            AgentOptions(cwd=str(repo)),
        )
    )
    results = [e for e in events if isinstance(e, ToolResult) and e.tool_id != "implement-1"]
    assert [r.is_error for r in results] == [True, False]
    assert not (repo.parent / "escape.py").exists()
    assert (repo / "ok.py").exists()


def test_fast_writes_a_feature_note(repo: Path) -> None:
    """fast writes FEATURE-<slug>.md describing the feature."""
    text = run(repo, prompt("fast"))
    note = repo / "FEATURE-add-login-with-a-password.md"
    assert "Add login with a password" in note.read_text()
    assert "FEATURE-add-login-with-a-password.md" in text


def test_repair_fixes_a_broken_plan(repo: Path) -> None:
    """repair file=PATH rewrites a broken plan.yaml into one that validates, with the tasks."""
    plan_files(repo)
    broken = repo / SPEC_DIR / "plan.yaml"
    broken.write_text("phases: []\nfiles: [{path: /etc/passwd, action: delete}]\n")
    _, errors = validate_plan(broken, inside=repo)
    assert errors
    run(
        repo,
        prompt(
            f"repair file={SPEC_DIR}/plan.yaml",
            "Validation errors:",
            *(f"- {e}" for e in errors),
        ),
    )
    plan, errors = validate_plan(broken, inside=repo)
    assert errors == []
    assert plan is not None
    assert validate_tasks(repo / SPEC_DIR / "tasks.yaml", plan, inside=repo)[1] == []


@pytest.mark.parametrize("name", ["spec.yaml", "research.yaml", "tasks.yaml"])
def test_repair_fixes_every_kind_of_file(repo: Path, name: str) -> None:
    """Each spec file kind is rewritten valid; a repaired spec has no open questions and
    repaired tasks use the phases of the plan that is there."""
    (repo / SPEC_DIR).mkdir(parents=True)
    (repo / SPEC_DIR / "plan.yaml").write_text(
        "phases:\n  - {id: build, name: Build, parallel: false}\n"
        "files:\n  - {path: x.py, action: create}\n"
    )
    (repo / SPEC_DIR / name).write_text("- not: a mapping\n")
    run(repo, prompt(f"repair file={SPEC_DIR}/{name}", "Validation errors:", "- broken"))
    path = repo / SPEC_DIR / name
    if name == "spec.yaml":
        spec, errors = validate_spec(path, number=1, branch=BRANCH, inside=repo)
        assert spec is not None
        assert spec.open_questions == []
    elif name == "research.yaml":
        errors = validate_research(path, inside=repo)[1]
    else:
        plan, _ = validate_plan(repo / SPEC_DIR / "plan.yaml", inside=repo)
        assert plan is not None
        tasks, errors = validate_tasks(path, plan, inside=repo)
        assert tasks is not None
        assert {t.phase for t in tasks.tasks} == {"build"}
    assert errors == []


def test_resolve_writes_nothing(repo: Path) -> None:
    """resolve says the demo cannot resolve conflicts and changes nothing."""
    events = list(demo().stream(prompt("resolve"), AgentOptions(cwd=str(repo))))
    assert not [e for e in events if isinstance(e, ToolUse) and e.name == "Write"]
    result = events[-1]
    assert isinstance(result, Completed)
    assert "cannot resolve" in result.result.text
    assert LABEL in result.result.text


# --------------------------------------------------------------------- streaming


def test_stream_shape_for_a_writing_step(repo: Path) -> None:
    """Session, Glob, then one Write per file with its path, text, and Completed last; the
    text deltas add up to the result's text."""
    events = list(demo().stream(prompt("plan"), AgentOptions(cwd=str(repo))))
    assert isinstance(events[0], SessionStarted)
    writes = [e for e in events if isinstance(e, ToolUse) and e.name == "Write"]
    assert [w.input for w in writes] == [
        {"file_path": f"{SPEC_DIR}/plan.yaml"},
        {"file_path": f"{SPEC_DIR}/tasks.yaml"},
    ]
    results = {e.tool_id: e for e in events if isinstance(e, ToolResult)}
    assert all(not results[w.tool_id].is_error for w in writes)
    completed = events[-1]
    assert isinstance(completed, Completed)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == completed.result.text
    assert text.startswith(LABEL)


def test_analyze_repository_prompts_are_unchanged(repo: Path) -> None:
    """A prompt without the feature marker still gets the analyze-repository answers."""
    text = run(repo, "Your task now: Describe its structure.")
    assert text.startswith(f"{LABEL}\n## Structure")


def test_counts_of_one_read_in_the_singular(tmp_path: Path) -> None:
    """A repository of one Python file: the demo agent says `1 file`, `1 Python file`,
    `0 test files` (never `1 files`) in every step that counts, and its Glob says `1 file`.
    """
    root = tmp_path / "one"
    root.mkdir()
    (root / "main.py").write_text("print('hi')\n")
    said = [
        run(root, "Your task now: Describe its structure."),
        run(root, "Your task now: Write the final analysis."),
        run(root, prompt("analyze")),
    ]
    glob = [
        e.output
        for e in demo().stream(prompt("analyze"), AgentOptions(cwd=str(root)))
        if isinstance(e, ToolResult)
    ]
    text = "\n".join(said + glob)
    assert "1 files" not in text
    assert "1 Python files" not in text
    assert "- 1 file; top level: main.py" in said[0]
    assert "- 1 Python file, 0 test files" in said[0]
    assert "1 file, 1 Python, 0 tests" in said[1]
    assert "- 1 file; top level: main.py" in said[2]
    assert glob == ["1 file"]
