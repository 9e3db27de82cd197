"""The demo agent's answers to the feature workflow's steps: a spec, research, a plan and
tasks that validate, code and tests in the repository's language, repairs, and the
files each task declares, all from the prompt and the repository, without an AI.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, replace
from itertools import takewhile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from events.words import counted
from shep.demo import LABEL

if TYPE_CHECKING:
    from shep.workflows.feature_specs import Plan, Research, Spec, Tasks


def repo_files(root: Path) -> list[str]:
    """The repository's files (up to 200, sorted), but for git's, dependencies and caches."""
    skip = {".git", "node_modules", ".venv", "__pycache__"}
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not any(part in skip for part in p.relative_to(root).parts)
    )[:200]


_MARKER = re.compile(r"^\[shep feature: (?P<step>[a-z]+)(?: \w+=(?P<arg>[^\]]*))?\]\s*$", re.M)
_FEATURE = re.compile(r"^Feature:[ \t]*(?P<text>.*?)\s*$", re.M)
_SPEC_DIR = re.compile(r"^Spec directory:[ \t]*(?P<path>\S+)\s*$", re.M)
_BRANCH = re.compile(r"^Branch:[ \t]*(?P<name>\S+)", re.M)
_FILES = re.compile(r"^Files:[ \t]*(?P<list>.*?)\s*$", re.M)
_ANSWERS_HEADER = "Answers to your open questions:"

#: File extension -> the technology it shows, for spec.yaml's ``technologies``.
_TECHNOLOGIES = {
    ".py": "Python",
    ".ts": "TypeScript",
    ".tsx": "TypeScript",
    ".js": "JavaScript",
    ".jsx": "JavaScript",
    ".go": "Go",
    ".rs": "Rust",
    ".java": "Java",
    ".rb": "Ruby",
    ".sh": "Shell",
    ".md": "Markdown",
}
#: Languages the demo writes code in: extension -> the name of its test file for ``stem``.
_TEST_NAMES = {
    ".py": "test_{stem}.py",
    ".ts": "{stem}.test.ts",
    ".js": "{stem}.test.js",
}
_LINE_COMMENTS = {
    **dict.fromkeys((".py", ".sh", ".rb", ".toml", ".yaml", ".yml", ".cfg", ".ini"), "#"),
    **dict.fromkeys((".js", ".jsx", ".ts", ".tsx", ".go", ".rs", ".java", ".c", ".h"), "//"),
}


@dataclass(frozen=True)
class FeatureRequest:
    """What a feature workflow prompt asks: the step, its argument, the feature, where."""

    step: str
    arg: str
    feature: str
    spec_dir: str
    prompt: str


def feature_request(prompt: str) -> FeatureRequest | None:
    """The feature workflow request in ``prompt``; None for any other prompt."""
    marker = _MARKER.search(prompt)
    if marker is None:
        return None
    feature = _FEATURE.search(prompt)
    spec_dir = _SPEC_DIR.search(prompt)
    return FeatureRequest(
        step=marker["step"],
        arg=(marker["arg"] or "").strip(),
        feature=(feature["text"] if feature else "") or "a new feature",
        spec_dir=spec_dir["path"].rstrip("/") if spec_dir else "",
        prompt=prompt,
    )


def _slug(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())[:6]
    return "-".join(words)[:48].strip("-") or "feature"


def _title(feature: str) -> str:
    title = " ".join(feature.split())
    return title[:1].upper() + title[1:]


def _branch(root: Path, prompt: str) -> str:
    """The worktree's branch as git says, else the prompt's ``Branch:`` line, else unknown."""
    from events.errors import GitError
    from shep.git import current_branch

    try:
        found = current_branch(root) or ""
    except GitError:
        found = ""
    if found:
        return found
    line = _BRANCH.search(prompt)
    return line["name"] if line else "unknown"


def _code_files(root: Path) -> list[str]:
    return [f for f in repo_files(root) if not f.startswith("specs/")]


def _technologies(files: list[str]) -> list[str]:
    return sorted({_TECHNOLOGIES[s] for f in files if (s := Path(f).suffix) in _TECHNOLOGIES})


def _language(files: list[str]) -> str:
    """The extension the demo writes code with: the repository's main language, if one of
    ``_TEST_NAMES`` has most of the code files; Python otherwise."""
    counts = Counter(Path(f).suffix for f in files if Path(f).suffix in _TEST_NAMES)
    if not counts:
        return ".py"
    suffix, count = max(sorted(counts.items()), key=lambda item: item[1])
    return suffix if count * 2 > sum(counts.values()) else ".py"


def _layout(request: FeatureRequest, root: Path) -> tuple[str, str, str]:
    """The core, command-line and test files the demo plans for the feature: new files in
    a directory named after the spec directory's slug, in the repository's main language."""
    suffix = _language(_code_files(root))
    slug = PurePosixPath(request.spec_dir).name.partition("-")[2] or _slug(request.feature)
    name = slug.replace("-", "_") if suffix == ".py" else slug
    base = f"feature/{name}"
    return (
        f"{base}/core{suffix}",
        f"{base}/cli{suffix}",
        f"{base}/" + _TEST_NAMES[suffix].format(stem=name if suffix == ".py" else "core"),
    )


def _spec_number(spec_dir: str) -> int:
    match = re.match(r"(\d+)-", PurePosixPath(spec_dir).name)
    return int(match[1]) if match else 1


def _answers(prompt: str) -> list[str]:
    """The ``- question: answer`` lines under the prompt's answers header, if any."""
    if _ANSWERS_HEADER not in prompt:
        return []
    lines = prompt.split(_ANSWERS_HEADER, 1)[1].strip("\n").splitlines()
    return [line[2:].strip() for line in takewhile(lambda ln: ln.startswith("- "), lines)]


def _spec(request: FeatureRequest, root: Path, *, ask: bool) -> Spec:
    """spec.yaml; with one open question when ``ask``, else with the prompt's answers."""
    from shep.workflows.feature_specs import OpenQuestion, QuestionOption, Spec

    directory = PurePosixPath(_layout(request, root)[0]).parent
    answers = [] if ask else _answers(request.prompt)
    content = (
        f"# {_title(request.feature)}\n\n"
        f"> Written by shep's demo agent {LABEL}: canned requirements for a first run.\n\n"
        f"## What\n\n{request.feature}\n\n"
        "## Acceptance criteria\n\n"
        "- The feature's code lives in its own directory.\n"
        "- It has tests, and the project's tests pass.\n"
    )
    if answers:
        content += "\n## Decisions from your answers\n\n" + "".join(f"- {a}\n" for a in answers)
    questions = []
    if ask:
        questions.append(
            OpenQuestion(
                question="Where should the feature's code live?",
                options=[
                    QuestionOption(
                        label="A new directory",
                        description=f"{directory}/, apart from the existing code",
                        recommended=True,
                    ),
                    QuestionOption(
                        label="Next to the existing code",
                        description="in the modules it touches",
                    ),
                    QuestionOption(label="A separate script", description="outside the project"),
                ],
            )
        )
    return Spec(
        name=_title(request.feature)[:60].rstrip(),
        number=_spec_number(request.spec_dir),
        branch=_branch(root, request.prompt),
        one_liner=_title(request.feature),
        summary=f"The demo agent's requirements for: {request.feature}",
        phase="requirements",
        content=content,
        technologies=_technologies(_code_files(root)),
        size="S",
        open_questions=questions,
    )


def _research(request: FeatureRequest, root: Path) -> Research:
    from shep.workflows.feature_specs import Decision, Research

    core, _, test = _layout(request, root)
    return Research(
        decisions=[
            Decision(
                title="Where the code lives",
                chosen=f"a new directory, {PurePosixPath(core).parent}/",
                rejected=["spread across the existing modules"],
                rationale="An isolated directory keeps the change small and easy to review.",
            ),
            Decision(
                title="How it is tested",
                chosen=f"unit tests in {PurePosixPath(test).name}, next to the code",
                rejected=["manual checks only"],
                rationale="The project's test command then covers the feature too.",
            ),
        ]
    )


def _plan(
    request: FeatureRequest, root: Path, phases: tuple[str, str] = ("p1", "p2")
) -> tuple[Plan, Tasks]:
    """plan.yaml and tasks.yaml: the core first, then its command line and tests side by side.
    ``phases`` names the serial and the parallel phase the tasks go to."""
    from shep.workflows.feature_specs import Plan, PlanFile, PlanPhase, Task, Tasks

    core, cli, test = _layout(request, root)
    plan = Plan(
        phases=[
            PlanPhase(id="p1", name="Core", parallel=False),
            PlanPhase(id="p2", name="Command line and tests", parallel=True),
        ],
        files=[PlanFile(path=path, action="create") for path in (core, cli, test)],
    )
    first, second = phases
    tasks = Tasks(
        tasks=[
            Task(
                id="t1",
                title="Write the core",
                state="todo",
                phase=first,
                acceptance=[f"{core} holds the feature's logic"],
                files=[core],
                description=f"The heart of: {request.feature}",
            ),
            Task(
                id="t2",
                title="Add the command-line entry",
                state="todo",
                phase=second,
                acceptance=[f"{cli} exposes the feature"],
                files=[cli],
            ),
            Task(
                id="t3",
                title="Test the core",
                state="todo",
                phase=second,
                acceptance=[f"{test} covers the core"],
                files=[test],
            ),
        ]
    )
    return plan, tasks


def _source(path: str, feature: str, task: str) -> str:
    """A small file for ``path`` that names the task and the feature, in the file's language."""
    suffix = PurePosixPath(path).suffix
    name = PurePosixPath(path).name
    header = f"Task {task} of the feature: {feature}. Written by shep's demo agent {LABEL}."
    comment = _LINE_COMMENTS.get(suffix)
    if suffix == ".py":
        text = f"# {header}\n\nFEATURE = {feature!r}\nTASK = {task!r}\n"
        if name.startswith("test_") or name.endswith("_test.py"):
            ident = re.sub(r"\W", "_", task)
            text += f"\n\ndef test_{ident}_names_the_feature() -> None:\n    assert FEATURE\n"
        return text
    if suffix in (".js", ".jsx", ".ts", ".tsx"):
        return (
            f"// {header}\n\nexport const FEATURE = {json.dumps(feature)};\n"
            f"export const TASK = {json.dumps(task)};\n"
        )
    if comment is not None:
        return f"{comment} {header}\n"
    if suffix in (".md", ".markdown"):
        return f"# Task {task}\n\n{feature}\n\n> Written by shep's demo agent {LABEL}.\n"
    return f"{header}\n"


def _implement(request: FeatureRequest) -> tuple[list[tuple[str, str]], str]:
    listed = _FILES.search(request.prompt)
    files = [f.strip() for f in (listed["list"] if listed else "").split(",") if f.strip()]
    writes = [(path, _source(path, request.feature, request.arg)) for path in files]
    done = ", ".join(files) if files else "nothing (the task declares no files)"
    return writes, f"{LABEL}\nTask {request.arg} done: wrote {done}."


def _repair(request: FeatureRequest, root: Path) -> tuple[list[tuple[str, str]], str]:
    from shep.workflows.feature_specs import dump_yaml, validate_plan

    path = PurePosixPath(request.arg)
    fixed = replace(request, spec_dir=str(path.parent))
    content: str | None = None
    if path.name == "spec.yaml":
        content = dump_yaml(_spec(fixed, root, ask=False))
    elif path.name == "research.yaml":
        content = dump_yaml(_research(fixed, root))
    elif path.name == "plan.yaml":
        content = dump_yaml(_plan(fixed, root)[0])
    elif path.name == "tasks.yaml":
        # The tasks must fit whatever plan.yaml is there: use its first and last phases.
        plan, _ = validate_plan(root / path.parent / "plan.yaml", inside=root)
        ids = (plan.phases[0].id, plan.phases[-1].id) if plan else ("p1", "p2")
        content = dump_yaml(_plan(fixed, root, ids)[1])
    if content is None:
        return [], f"{LABEL}\nThe demo agent does not know how to repair {request.arg}."
    return [(request.arg, content)], f"{LABEL}\nRewrote {request.arg} so that it validates."


def feature_answer(request: FeatureRequest, root: Path) -> tuple[list[tuple[str, str]], str]:
    """The files the demo writes for ``request`` (path relative to ``root``, content) and its
    reply. The spec files are built as feature_specs' Structs, so they always validate."""
    from shep.workflows.feature_specs import dump_yaml, next_spec_number, spec_dir_name

    if not request.spec_dir:
        number = next_spec_number(root)
        request = replace(
            request, spec_dir=f"specs/{spec_dir_name(number, _slug(request.feature))}"
        )
    spec_dir = request.spec_dir
    step = request.step
    if step == "analyze":
        files = _code_files(root)
        top = sorted({f.split("/")[0] for f in files})
        technologies = _technologies(files)
        tests = [f for f in files if "test" in f]
        directory = PurePosixPath(_layout(request, root)[0]).parent
        return [], (
            f"{LABEL}\n## Repository\n- {counted(len(files), 'file')}; "
            f"top level: {', '.join(top) or 'none'}\n"
            f"- Technologies: {', '.join(technologies) or 'none recognised'}\n"
            f"- Tests {'present' if tests else 'missing'}\n"
            f"- The feature fits in a new directory, {directory}/\n"
        )
    if step == "requirements":
        ask = _ANSWERS_HEADER not in request.prompt
        spec = _spec(request, root, ask=ask)
        asked = "with one open question" if ask else "with your answers"
        return [(f"{spec_dir}/spec.yaml", dump_yaml(spec))], (
            f"{LABEL}\nWrote {spec_dir}/spec.yaml {asked}."
        )
    if step == "research":
        return [(f"{spec_dir}/research.yaml", dump_yaml(_research(request, root)))], (
            f"{LABEL}\nWrote {spec_dir}/research.yaml: two decisions."
        )
    if step == "plan":
        plan, tasks = _plan(request, root)
        return [
            (f"{spec_dir}/plan.yaml", dump_yaml(plan)),
            (f"{spec_dir}/tasks.yaml", dump_yaml(tasks)),
        ], f"{LABEL}\nWrote {spec_dir}/plan.yaml and tasks.yaml: 2 phases, 3 tasks."
    if step == "implement":
        return _implement(request)
    if step == "fast":
        path = f"FEATURE-{_slug(request.feature)}.md"
        content = (
            f"# {_title(request.feature)}\n\n{request.feature}\n\n"
            f"> Written by shep's demo agent {LABEL}: a real agent would implement the "
            "feature here.\n"
        )
        return [(path, content)], f"{LABEL}\nWrote {path} describing the feature."
    if step == "repair":
        return _repair(request, root)
    if step == "revise":
        marker = "Their reason:\n"
        reason = (
            request.prompt.split(marker, 1)[1].split("\n", 1)[0] if marker in request.prompt else ""
        )
        content = (
            f"# Revision of: {request.feature}\n\nThe reviewer asked: {reason or '(no reason)'}\n\n"
            f"> Written by shep's demo agent {LABEL}: a real agent would change the code.\n"
        )
        return [("REVISION.md", content)], f"{LABEL}\nWrote REVISION.md for the reviewer's reason."
    if step == "resolve":
        return [], (
            f"{LABEL}\nThe demo agent cannot resolve merge conflicts; "
            "resolve them by hand in the worktree."
        )
    return [], f"{LABEL}\nThe demo agent has nothing to do for step {step!r}; nothing changed."
