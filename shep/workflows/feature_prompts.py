"""The feature workflow's prompts: the marker, the feature and spec directory, and the
schema each step must write (see ``shep.workflows.feature``).

Every prompt starts with a ``[shep feature: STEP]`` marker line; the demo agent and the
test agents key on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def inputs_of(state: Mapping[str, Any]) -> Mapping[str, str]:
    """The run's inputs (``shep feat new`` records them; see ``feature.INPUTS``)."""
    return state.get("inputs") or {}


def spec_dir_of(state: Mapping[str, Any]) -> str:
    """``specs/NNN-slug``, relative to the worktree."""
    return inputs_of(state)["spec_dir"]


def _header(step: str, state: Mapping[str, Any]) -> str:
    inputs = inputs_of(state)
    return (
        f"[shep feature: {step}]\n"
        f"Feature: {inputs['description']}\n"
        f"Spec directory: {inputs['spec_dir']}\n"
        f"Branch: {inputs['branch']} (based on {inputs['base']})\n"
    )


SPEC_SCHEMA = """\
spec.yaml holds (YAML, snake_case keys):
  name: short name of the feature
  number: {number}
  branch: {branch}
  one_liner: one-line summary
  summary: a paragraph
  phase: requirements
  content: the requirements in Markdown (what, why, acceptance criteria)
  technologies: [list of technologies involved]
  size: one of XS, S, M, L, XL
  open_questions: what you still need a person to decide; each
    {{question: ..., options: [{{label: ..., description: ..., recommended: true|false}}, ...]}}
    with 2 to 9 options and exactly one recommended. Leave it [] when nothing is unclear."""

RESEARCH_SCHEMA = """\
research.yaml holds:
  decisions: a non-empty list of
    {title: ..., chosen: ..., rejected: [alternatives considered], rationale: ...}"""

PLAN_SCHEMA = """\
plan.yaml holds:
  phases: [{id: p1, name: ..., parallel: true|false}, ...]   (ids unique)
  files: [{path: relative/path, action: create|modify}, ...]  (not empty)
tasks.yaml holds:
  tasks: [{id: t1, title: ..., state: todo, phase: <an id of plan.yaml's phases>,
           acceptance: [criteria, ...], files: [the files this task writes],
           description: ...}, ...]
Tasks of a parallel phase run at the same time when their files do not overlap."""


def analyze_prompt(state: Mapping[str, Any]) -> str:
    return (
        _header("analyze", state)
        + "\nStudy this repository (read only: do not change files): what it is, how it is "
        "built and tested, its conventions, and where this feature would fit. Reply with a "
        "concise analysis."
    )


def requirements_prompt(state: Mapping[str, Any]) -> str:
    inputs = inputs_of(state)
    number = int(Path(inputs["spec_dir"]).name.split("-", 1)[0])
    text = (
        _header("requirements", state)
        + f"\nWrite the feature's requirements to {inputs['spec_dir']}/spec.yaml.\n"
        + SPEC_SCHEMA.format(number=number, branch=inputs["branch"])
    )
    analysis = (state.get("results") or {}).get("analyze")
    if analysis:
        text += f"\n\nWhat the analysis of the repository found:\n{analysis}"
    qa = state.get("qa") or {}
    if qa:
        text += "\n\nAnswers to your open questions:\n" + "".join(
            f"- {question}: {answer}\n" for question, answer in qa.items()
        )
        text += "Take them into account; ask only what is still open."
    return text


def research_prompt(state: Mapping[str, Any]) -> str:
    return (
        _header("research", state)
        + f"\nRead {spec_dir_of(state)}/spec.yaml and research how to build it in this "
        f"repository. Write the technical decisions to {spec_dir_of(state)}/research.yaml.\n"
        + RESEARCH_SCHEMA
    )


def plan_prompt(state: Mapping[str, Any]) -> str:
    spec_dir = spec_dir_of(state)
    return (
        _header("plan", state)
        + f"\nFrom {spec_dir}/spec.yaml and {spec_dir}/research.yaml, plan the "
        f"implementation: write {spec_dir}/plan.yaml and {spec_dir}/tasks.yaml.\n" + PLAN_SCHEMA
    )


def fast_prompt(state: Mapping[str, Any]) -> str:
    return (
        _header("fast", state)
        + "\nImplement this feature in this repository now: write the code and its tests, "
        "following the repository's conventions. Do not commit; shep commits the branch."
    )


def revise_prompt(state: Mapping[str, Any]) -> str:
    return (
        _header("revise", state)
        + "\nThe implementation of this feature was reviewed before merging. Change the "
        "code as the reviewer asks. Do not commit; shep commits the branch."
    )


def repair_prompt(state: Mapping[str, Any]) -> str:
    repair = state.get("repair") or {}
    errors = "".join(f"- {error}\n" for error in repair.get("errors", ()))
    return (
        _header(f"repair file={repair.get('file', '')}", state)
        + f"\n{repair.get('file')} does not validate. Fix exactly these problems by rewriting "
        f"the file; change nothing else.\nValidation errors:\n{errors}\n{repair.get('schema', '')}"
    )


def resolve_prompt(state: Mapping[str, Any]) -> str:
    inputs = inputs_of(state)
    files = ", ".join((state.get("merge") or {}).get("conflicts", ()))
    return (
        _header("resolve", state)
        + f"\nMerging this branch into {inputs['base']} conflicts in: {files}. In this "
        f"worktree, run `git merge {inputs['base']}`, resolve every conflict keeping both "
        "sides' intent, and commit the merge."
    )


def task_prompt(state: Mapping[str, Any], task: Any) -> str:
    acceptance = "".join(f"- {line}\n" for line in task.acceptance)
    return (
        _header(f"implement task={task.id}", state)
        + f"\nImplement task {task.id}: {task.title}\n"
        + (f"{task.description}\n" if task.description else "")
        + f"Files: {', '.join(task.files)}\n"
        + f"Acceptance:\n{acceptance}"
        + f"The whole plan is in {spec_dir_of(state)}/plan.yaml and tasks.yaml; do only this "
        "task. Do not commit; shep commits the branch."
    )
