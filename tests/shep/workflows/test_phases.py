"""Steps without a phase of their own (repair, give_up) count for the phase whose file they
fix: in the progress lines of a run and in `shep feat show`.

Whole feature runs: `shep feat new` with the fake feature agent (a real subprocess)
writing invalid spec files, the real worker, the real store.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shep.workflows.feature import FEATURE_WORKFLOW
from tests.shep.workflows.conftest import FeatureAgent
from tests.shep.workflows.test_feature_workflow import feat_new, only_run
from tests.support.cli import shep

PROGRESS = re.compile(r"^\[(\d+)/8\] (\S+)")


def _progress(stderr: str) -> list[tuple[int, str]]:
    """(phase number, node) of each progress line a run printed."""
    found = (PROGRESS.match(line) for line in stderr.splitlines())
    return [(int(m.group(1)), m.group(2)) for m in found if m]


def _shown_nodes(run_id: str) -> list[tuple[str, str]]:
    """(phase, node) of each row `shep feat show --json` lists, in order."""
    shown = shep("feat", "show", run_id[:8], "--json", check=True)
    return [(n["phase"], n["node"]) for n in json.loads(shown.stdout)["nodes"]]


def test_a_step_of_no_phase_counts_for_the_phase_the_run_is_in() -> None:
    """Workflow.phase: a phase is its own; a declared node has its declared phase; repair
    and give_up have the phase the run is in, and themselves only when it is unknown.
    """
    phase = FEATURE_WORKFLOW.phase
    assert phase("plan", "requirements") == "plan"
    assert phase("validate_plan", "requirements") == "plan"
    assert phase("repair", "requirements") == "requirements"
    assert phase("give_up", "plan") == "plan"
    assert phase("repair") == "repair"


@pytest.mark.slow
def test_repairs_show_under_the_phase_whose_file_they_fix(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """spec.yaml and plan.yaml each invalid once: the repair of spec.yaml is shown as
    `[3/8] repair` (requirements) and that of plan.yaml as `[5/8] repair` (plan), never
    `[0/8]`; `feat show` lists a repair row under each of the two phases.
    """
    agent.script(invalid={"spec.yaml": 1, "plan.yaml": 1})
    result = feat_new(repo, "--allow-all")
    assert result.returncode == 0, result.stderr
    shown = _progress(result.stderr)
    assert [p for p in shown if p[1] == "repair"] == [(3, "repair")] * 2 + [(5, "repair")] * 2
    assert all(number > 0 for number, _ in shown), shown
    nodes = _shown_nodes(only_run(shep_home))
    assert ("requirements", "repair") in nodes
    assert ("plan", "repair") in nodes
    assert nodes.index(("requirements", "repair")) < nodes.index(("research", "research"))
    assert not [n for n in nodes if n[0] == n[1] == "repair"]


@pytest.mark.slow
def test_giving_up_shows_under_the_phase_it_gives_up_on_and_after_a_resume(
    repo: Path, agent: FeatureAgent, shep_home: Path
) -> None:
    """plan.yaml stays invalid: `[5/8] give_up failed`, not `[0/8]`; `shep resume` (a new
    worker, which knows the phase from the log) shows `[5/8] give_up (attempt 2)`, and
    `feat show` lists give_up under plan.
    """
    agent.script(invalid={"plan.yaml": 4})
    result = feat_new(repo, "--allow-all")
    assert result.returncode != 0
    assert re.search(r"^\[5/8\] give_up failed in ", result.stderr, re.M), result.stderr
    run_id = only_run(shep_home)
    agent.script()
    resumed = shep("resume", run_id[:8], timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "[5/8] give_up (attempt 2) ..." in resumed.stderr.splitlines()
    assert ("plan", "give_up") in _shown_nodes(run_id)
