"""What the supervisor costs per item, beside a person's approval of the same kind of gate.

    python benchmarks/supervisor.py [--quick]

Runs suspended on one approval gate each (200 with ``--quick``, else 1,000),
in one store. Half are approved by ``approve_item`` as a person would (the
baseline: load the item and its run, append the decision); the other half
are decided by the supervisor in one ``drain()``: follow the log, fold the
policies, run the evaluation graph (ingest, policy, guardrails, emit), and
record the decision with its effect and its tracking position in one commit.
The policy's one guardrail is ``tests_must_pass`` with ``auto_approve``, and
each run's tests passed: no evaluator is called, so the figure is the
supervisor's own overhead, which an evaluator's call (seconds) dwarfs. No
goal: the figure is watched for regressions. Most of it is LangGraph's
per-``invoke`` machinery (about 3 ms), the price of the evaluation being a
graph.

- ``supervisor_items_per_s``: items the supervisor decided per second.
- ``supervisor_decide_ratio``: its seconds per item over the baseline's.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from uuid import UUID

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from commands.approve_item import approve_item  # noqa: E402
from commands.configure_agent import change_setting  # noqa: E402
from commands.create_run import create_run  # noqa: E402
from commands.policies import configure_policy  # noqa: E402
from commands.run_state import append_to_run  # noqa: E402
from commands.start_run import start_run  # noqa: E402
from commands.suspend_run import Ask, suspend_run  # noqa: E402
from events.features import TestsRan  # noqa: E402
from events.inbox import item_stream_id  # noqa: E402
from events.store import EventStore  # noqa: E402
from events.supervisor import Guardrails  # noqa: E402
from shep.home.identity import host_name  # noqa: E402
from shep.home.procs import process_start  # noqa: E402


def _gated_runs(store: EventStore, repo: Path, count: int) -> list[UUID]:
    """``count`` runs, each with a passed test run, suspended on one gate; their item ids."""
    me, host, started = os.getpid(), host_name(), process_start(os.getpid())
    items = []
    for _ in range(count):
        run = create_run(
            store,
            workflow="gated-review",
            agent_type="claude-code",
            repo=str(repo),
            node_names=["draft", "approve", "finish"],
            created_by="bench",
            pid=me,
            host=host,
            process_start=started,
        )
        state = start_run(store, run, pid=me, host=host, process_start=started)
        append_to_run(
            store,
            run,
            [
                (
                    TestsRan,
                    {"command": "pytest", "exit_code": 0, "passed": True, "duration_ms": 1},
                )
            ],
            epoch=state.epoch,
        )
        ask = Ask(interrupt_id="gate", kind="approval", node="approve", summary="ready")
        suspend_run(store, run, [ask], epoch=state.epoch)
        items.append(item_stream_id(run, "gate"))
    return items


def bench(quick: bool) -> dict[str, float]:
    from shep.supervisor.loop import Supervisor

    count = 200 if quick else 1_000
    with tempfile.TemporaryDirectory(prefix="shep-bench-supervisor-") as tmp:
        work = Path(tmp)
        with EventStore(work / "shep.db") as store:
            baseline_items = _gated_runs(store, work, count // 2)
            started = time.perf_counter()
            for item in baseline_items:
                approve_item(store, item, actor="user:bench", comment="ok")
            baseline = (time.perf_counter() - started) / len(baseline_items)
            # The person's decisions are before the supervisor's start: it skips them (one
            # tracking row each), so its share is timed on its own items only.
            change_setting(store, key="collaboration", value="on", changed_by="bench")
            configure_policy(
                store,
                "global",
                autonomy="autonomous",
                overrides={},
                guardrails=Guardrails(tests_must_pass=True, auto_approve=True),
                model=None,
                timeout=60,
                actor="bench",
            )
            supervisor = Supervisor(store, evaluator=None)
            supervisor.drain()  # the baseline's items, decided already: skipped
            items = _gated_runs(store, work, count // 2)
            started = time.perf_counter()
            supervisor.drain()
            elapsed = time.perf_counter() - started
            decided = sum(1 for _, recorded in supervisor.handled if recorded and recorded.acted)
            if decided != len(items):
                raise AssertionError(f"the supervisor decided {decided} of {len(items)} items")
    per_item = elapsed / len(items)
    return {
        "supervisor_items_per_s": round(len(items) / elapsed, 1),
        "supervisor_decide_ms": round(per_item * 1000, 2),
        "supervisor_baseline_ms": round(baseline * 1000, 2),
        "supervisor_decide_ratio": round(per_item / baseline, 2),
    }


if __name__ == "__main__":
    print(json.dumps(bench("--quick" in sys.argv), indent=2))
