"""A gated run with the REAL claude CLI: agent step, approval gate, ``shep approve``, agent step.

``real-gate`` (tests/support/real_gate_workflows.py) runs ``plan`` with the real ``claude``
against the scripted LLM on 127.0.0.1, then stops at its gate: the worker records the
inbox item and exits. ``shep approve RUN`` records the decision and resumes the run in a
new background worker, whose ``apply`` step continues the agent session ``plan`` began:
the server sees ``apply``'s request replay ``plan``'s turns. The event log holds the
approval with the deciding user as its actor.
"""

from __future__ import annotations

import getpass
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from events.inbox import ApprovalGranted, ApprovalRequested
from events.store import EventStore
from shep.home.procs import pid_alive
from tests.cli.test_run_real import EMBEDDED, Shep
from tests.support.fakellm import FakeLLM, RecordedRequest
from tests.support.real_clis import TOKEN, CliSetup

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
PLAN_ANSWER = "PLAN-3e71: rename the entry point and add one test."
APPLY_ANSWER = "APPLY-b40c: done as planned; nothing else changed."
# The steps' markers (gate_workflows.py), escaped as they appear inside a JSON body.
MARKERS = {"plan": "[step:plan]", "apply": "[step:apply]"}


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """The scripted LLM; it answers 401 to any key but shep's token."""
    with FakeLLM(api_key=TOKEN) as llm:
        yield llm


def _describe(llm: FakeLLM) -> str:
    return "\n".join(
        f"  {r.method} {r.path} [{r.api}{' aux' if r.aux else ''}] -> {r.outcome}"
        for r in llm.requests
    )


def _wait(shep: Shep, run_id: str, done: Callable[[dict[str, Any]], bool], what: str) -> None:
    """Poll ``shep status RUN`` until ``done``; fail at once if the run failed or was cancelled."""
    deadline = time.monotonic() + 180
    row: dict[str, Any] = {}
    while time.monotonic() < deadline:
        row = json.loads(shep("status", run_id, "--json").stdout)
        if done(row):
            return
        if row["status"] in ("failed", "cancelled", "interrupted"):
            break
        time.sleep(0.2)
    log = shep("logs", run_id, check=False).stdout[-4000:]
    raise AssertionError(f"waiting for {what}, the run is {row.get('status')}:\n{log}")


def _step_requests(llm: FakeLLM) -> dict[str, list[RecordedRequest]]:
    """Each step's model requests: a request belongs to the last step marker it carries."""
    by_step: dict[str, list[RecordedRequest]] = {s: [] for s in MARKERS}
    for request in llm.model_requests:
        text = request.dumps()
        found = [s for s, marker in MARKERS.items() if marker in text]
        assert found, f"a model request that no step's prompt is in: {text[:500]}"
        by_step[found[-1]].append(request)
    return by_step


@pytest.mark.parametrize("agent", ["claude-code"])
def test_gate_approved_then_the_session_goes_on(
    agent: str, cli: CliSetup, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """plan runs, the run waits at the gate with no worker, `shep approve` resumes it in
    the background, and apply continues plan's claude session; the approval's actor is
    user:<login>.
    """
    repo = cli.cwd
    (repo / "src").mkdir(exist_ok=True)
    (repo / "src" / "app.py").write_text("print('hello')\n")
    home = tmp_path / "shep-home"
    shep = Shep(cli, home)
    shep.env["SHEP_WORKFLOW_MODULES"] = "tests.support.real_gate_workflows"
    # Workers start in SHEP_HOME with PYTHONSAFEPATH: the test workflows come from ROOT.
    shep.env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    fake_llm.enqueue_text(PLAN_ANSWER)
    fake_llm.enqueue_text(APPLY_ANSWER)
    shep(
        "settings", "agent", "--agent", agent, "--auth", "token", "--token-stdin",
        "--binary", str(cli.binary), stdin=TOKEN + "\n",
    )  # fmt: skip

    started = shep("run", "real-gate", "--repo", str(repo), "--background", "--timeout", "90")
    run_id = started.stdout.strip()
    assert len(run_id) == 32, started.stdout
    _wait(shep, run_id, lambda r: r["status"] == "waiting_approval", "the gate")

    # The worker exits once the gate is recorded: a waiting run has no process.
    worker = json.loads(shep("status", run_id, "--json").stdout)["pid"]
    deadline = time.monotonic() + 30
    while pid_alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(worker), f"worker {worker} still runs while the run waits"

    # The gate is in the inbox and only plan has asked the model.
    items = json.loads(shep("inbox", "--json").stdout)
    assert [(i["kind"], i["run_id"], i["node"], i["phase"]) for i in items] == [
        ("approval", run_id, "approve", "plan")
    ], items
    gate = items[0]
    assert PLAN_ANSWER in gate["prompt"], gate
    assert fake_llm.pending() == 1, f"apply ran before the approval:\n{_describe(fake_llm)}"
    assert len(_step_requests(fake_llm)["plan"]) == 1

    approved = shep("approve", run_id)
    assert approved.stdout.startswith(f"Approved {gate['item_id'][:8]} (approve of run "), approved
    _wait(shep, run_id, lambda r: r["status"] == "completed", "completion after the approval")

    assert json.loads(shep("inbox", "--json").stdout) == []
    assert fake_llm.pending() == 0, f"scripted replies left over:\n{_describe(fake_llm)}"
    calls = fake_llm.model_requests
    assert calls
    assert all(c.api_key == TOKEN for c in calls)
    by_step = _step_requests(fake_llm)
    assert [len(by_step[s]) for s in MARKERS] == [1, 1], _describe(fake_llm)

    # apply resumed plan's session: its request replays plan's prompt and plan's answer,
    # and shep did not fall back to embedding the earlier result in the prompt.
    second = by_step["apply"][0].dumps()
    assert MARKERS["plan"] in second, "apply's request does not replay plan's prompt"
    assert PLAN_ANSWER in second, "apply's request does not replay plan's answer"
    assert EMBEDDED not in second, "shep embedded plan's result although it could resume"
    detail = json.loads(shep("status", run_id, "--json").stdout)
    nodes = {n["node"]: n for n in detail["nodes"]}
    assert {n: nodes[n]["status"] for n in ("plan", "approve", "apply")} == dict.fromkeys(
        ("plan", "approve", "apply"), "completed"
    )
    assert nodes["plan"]["agent_session_id"]
    assert nodes["apply"]["agent_session_id"] == nodes["plan"]["agent_session_id"]

    # The log: plan, the wait, a resume by another worker, then apply.
    lines = [json.loads(x) for x in shep("logs", run_id, "--json").stdout.splitlines()]
    kinds = [(line["kind"], line["node"]) for line in lines]
    waited = kinds.index(("run.waiting_approval", None))
    resumed = kinds.index(("run.resumed", None))
    assert kinds.index(("node.completed", "plan")) < waited < resumed
    assert (
        resumed < kinds.index(("node.started", "apply")) < kinds.index(("node.completed", "apply"))
    )
    assert kinds[-1] == ("run.completed", None)
    assert APPLY_ANSWER in "\n".join(str(line.get("message") or "") for line in lines)
    assert TOKEN not in json.dumps(lines)

    # The event log holds the request and the decision on the item's own stream.
    with EventStore(home / "shep.db") as store:
        events = store.load(UUID(gate["item_id"]))
    assert [type(e) for e in events] == [ApprovalRequested, ApprovalGranted]
    granted = events[1]
    assert isinstance(granted, ApprovalGranted)
    assert granted.actor == f"user:{getpass.getuser()}"
    assert shep("audit", "verify").stdout.startswith("OK: ")
