"""docs/features.md and docs/time-travel.md: one feature, from a sentence to a merged commit.

The built-in demo agent takes a copy of shep's sample repository through the
feature workflow: its question answered, the requirements approved, the
first plan rejected and the second approved, the merge approved, each with
``--wait`` in the foreground. Then the run is replayed, and forked twice.

The plan's second phase runs two tasks in parallel, so the order of their
lines varies between runs: the blocks that show them are compared as sets of
lines (``loose``).
"""

from __future__ import annotations

import json
from typing import Any

from shep.cli.docgen.scenarios import one_item, sample_repo
from shep.cli.docgen.scratch import ScenarioError, Scratch, Shown, Transcript

DESCRIPTION = "Add a low-stock report listing items below their reorder level"


def play(s: Scratch, out: Transcript) -> None:
    s.env["SHEP_DEMO_DELAY"] = "0.05"
    repo = sample_repo(s, s.root / "inventory")
    _feature(s, out, repo)
    _time_travel(s, out)


def _feature(s: Scratch, out: Transcript, repo: Any) -> None:
    out.add(
        "start",
        s.sh("shep settings agent --agent demo"),
        s.sh(f"shep feat new '{DESCRIPTION}'", cwd=repo),
        gap=True,
    )
    run = _feature_run(s)
    s.env["DOC_RUN"] = run
    question = one_item(s, run, "question")["item_id"]
    out.add(
        "question",
        s.sh("shep inbox"),
        s.sh(f"shep answer {question[:8]} --option 1 --wait"),
        gap=True,
    )
    prd = one_item(s, run, "approval")["item_id"]
    out.add(
        "prd",
        s.sh("shep inbox"),
        s.sh(f"shep approve {prd[:8]} --comment 'Scope is right.' --wait"),
        gap=True,
    )
    plan = one_item(s, run, "approval")["item_id"]
    out.add(
        "plan-reject",
        s.sh("shep inbox"),
        s.sh(
            f"shep reject {plan[:8]} --reason "
            "'Split the CLI from the report logic into its own task.' --wait"
        ),
        gap=True,
    )
    plan_2 = one_item(s, run, "approval")["item_id"]
    out.add(
        "plan-approve",
        s.sh("shep inbox"),
        s.sh(f"shep approve {plan_2[:8]} --wait"),
        gap=True,
        loose=True,
    )
    out.add("feat-ls", s.sh("shep feat ls"))
    merge = one_item(s, run, "approval")["item_id"]
    out.add(
        "merge",
        s.sh("shep inbox"),
        s.sh(f"shep approve {merge[:8]} --comment 'Tests pass; ship it.' --wait"),
        gap=True,
    )
    out.add(
        "afterwards",
        s.sh("shep feat ls --all"),
        s.sh(f"shep feat show {run[:8]}"),
        gap=True,
        loose=True,
    )
    out.add("git-log", s.sh("git log --stat -1", cwd=repo))
    out.add("refs", s.sh("git for-each-ref refs/shep/", cwd=repo), loose=True)


def _feature_run(s: Scratch) -> str:
    runs = json.loads(s.out("shep status --json 2>/dev/null"))
    features = [r for r in runs if r["workflow"] == "feature"]
    if len(features) != 1:
        raise ScenarioError(f"expected one feature run, found {len(features)}")
    return str(features[0]["run_id"])


def _frames(s: Scratch, run: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in s.out(f"shep replay {run} --json").splitlines()]


def _frame(frames: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    for frame in frames:
        if all(frame.get(k) == v for k, v in match.items()):
            return frame
    raise ScenarioError(f"no frame with {match}")


def _time_travel(s: Scratch, out: Transcript) -> None:
    run = s.env["DOC_RUN"]
    short = run[:8]
    frames = _frames(s, run)
    gate = _frame(frames, kind="approval", node="plan_gate", iteration=1)
    implement = _frame(frames, kind="node", node="implement")
    answer = _frame(frames, kind="decision", node="clarify")
    gate_2 = _frame(frames, kind="approval", node="plan_gate", iteration=2)
    out.add("replay-head", s.sh(f"shep replay {short} | head -n 26"))
    out.add("replay-gate", s.sh(f"shep replay {short} --at {gate['index']} | head -n 46"))
    out.add(
        "replay-implement",
        s.sh(f"shep replay {short} --at {implement['index']} | head -n 52"),
        loose=True,
    )
    out.add(
        "replay-json",
        s.sh(
            f"shep replay {short} --json | "
            "jq -c '{index, kind, node, iteration, status, agent_ms, waited_ms}'"
        ),
    )
    out.add("replay-frame", s.sh(f"shep replay {short} --json --at {answer['index']} | head -n 1"))
    out.add("replay-tree-alone", s.sh(f"shep replay {short} --tree"))
    past = len(frames) + 3
    wrong = s.sh(f"shep replay {short} --at {past}", code=2)
    out.add("replay-error", wrong, Shown("", "echo $?", str(wrong.code), 0))

    first = s.sh(f"shep fork {short} --at {gate['checkpoint_id'][:18]}", cwd=s.root)
    out.add("fork", first, s.sh("shep inbox"), gap=True)
    again = (
        f"shep fork {short} --at {gate_2['checkpoint_id'][:18]} --reapply-answers --id retry-merge"
    )
    out.add("fork-reapply", s.sh(again), loose=True)
    out.add("fork-again", s.sh(again), s.sh(f"shep replay {short} --tree"), gap=True)
    s.settle()
