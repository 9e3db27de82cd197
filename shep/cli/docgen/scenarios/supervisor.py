"""docs/supervisor.md: a feature run decided by a supervisor policy, with the demo agent.

The policy is autonomous with the merge gate under cosign: the supervisor
answers the question and approves the requirements and the plan by itself,
co-signs the merge, and a person's approval opens it. Then ``why``, a
``what-if`` under a stricter policy, and the audit export of its decisions.
"""

from __future__ import annotations

import re

from shep.cli.docgen.scenarios import one_item, sample_repo
from shep.cli.docgen.scratch import Scratch, Transcript

STRICTER = "autonomy: autonomous\nguardrails:\n  max_files_changed: 3\n"


def play(s: Scratch, out: Transcript) -> None:
    s.env["SHEP_DEMO_DELAY"] = "0.05"
    repo = sample_repo(s, s.root / "inventory")
    s.out("shep settings agent --agent demo")
    out.add(
        "flags",
        s.sh("shep settings flags"),
        s.sh("shep settings flags enable collaboration"),
        gap=True,
    )
    out.add(
        "configure",
        s.sh(
            "shep supervisor configure --autonomy autonomous --override merge=cosign "
            "--max-files-changed 20 --block 'migrations/*'"
        ),
        s.sh("shep supervisor show"),
        gap=True,
    )
    started = s.sh('shep feat new "Add a greeting command"', cwd=repo)
    s.settle()
    run = re.search(r"^Run ([0-9a-f]{8})", started.output, re.MULTILINE)[1]  # type: ignore[index]
    merge = one_item(s, run, "approval")["item_id"]
    inbox = s.sh("shep inbox")
    approve = s.sh(f'shep approve {merge[:8]} --comment "Read the diff; ship it."')
    s.settle()
    out.add(
        "feature",
        started,
        s.sh("cat $SHEP_HOME/logs/supervisor.log"),
        inbox,
        approve,
        s.sh("shep status"),
        gap=True,
    )
    out.add("why", s.sh(f"shep supervisor why {run}"))
    (s.root / "stricter.yaml").write_text(STRICTER)
    out.add(
        "what-if",
        s.sh("cat stricter.yaml"),
        s.sh("shep supervisor what-if --policy stricter.yaml"),
        gap=True,
    )
    out.add(
        "audit",
        s.sh(
            f"shep audit export --kind decisions --run {run} | grep SupervisorDecisionMade "
            "| head -1 | jq 'del(.state, .event)'"
        ),
    )
