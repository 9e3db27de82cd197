"""docs/audit.md: verifying and exporting the log, and tampering with it.

Two homes. The walkthrough's: one ``gated-review`` run with tests' fake
``claude``: alice answers, bob rejects the first draft with a reason that
starts like a spreadsheet formula, alice approves the second. The
supervisor's: the history ``tests/shep/audit/test_supervisor_export.py`` builds
with the real commands (a supervisor that approves, is overridden, co-signs,
is refused, advises), written into a home of its own.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from shep.cli.docgen.reference import CLONE
from shep.cli.docgen.scenarios import FAKE_CLAUDE, TEST_WORKFLOWS, git_repo, one_item, run_id
from shep.cli.docgen.scratch import ScenarioError, Scratch, Shown, Transcript

REASON = '=HYPERLINK("http://evil.example","click") and explain the migration'


def missing() -> str | None:
    import shutil

    lacking = [tool for tool in ("jq", "sqlite3", "ssh-keygen") if shutil.which(tool) is None]
    return f"{', '.join(lacking)} not installed" if lacking else None


def play(s: Scratch, out: Transcript) -> None:
    s.install("claude", FAKE_CLAUDE)
    s.env["SHEP_WORKFLOW_MODULES"] = TEST_WORKFLOWS
    repo = git_repo(s, s.root / "myapp")
    s.out("shep settings agent --agent claude-code")
    head = _walkthrough(s, out, repo)
    _exports(s, out, head)
    _supervisor(s, out)
    _tampering(s, out)


def _walkthrough(s: Scratch, out: Transcript, repo: Path) -> str:
    run = run_id(s.sh("shep run gated-review --background", cwd=repo))
    s.settle()
    question = one_item(s, run, "question")["item_id"]
    answer = s.sh(f"shep answer {question[:8]} --option small --as alice")
    s.settle()
    gate = one_item(s, run, "approval")["item_id"]
    reject = s.sh(f"shep reject {gate[:8]} --reason '{REASON}' --as bob")
    s.settle()
    gate_2 = one_item(s, run, "approval")["item_id"]
    approve = s.sh(f"shep approve {gate_2[:8]} --as alice")
    s.settle()
    verify = s.sh("shep audit verify")
    out.add("walkthrough", answer, reject, approve, verify)
    return verify.output.rsplit("Head hash: ", 1)[1].split()[0]


def _exports(s: Scratch, out: Transcript, head: str) -> None:
    out.add(
        "bad-options",
        s.sh("shep audit export --since yesterday", code=2),
        s.sh("shep audit export --kind everything", code=2),
        s.sh("shep audit export --format bundle", code=2),
    )
    out.add(
        "export-head",
        s.sh("shep audit export --kind decisions --output decisions.jsonl"),
        s.sh("head -1 decisions.jsonl"),
    )
    out.add(
        "export-line",
        s.sh("sed -n 3p decisions.jsonl | jq -c 'del(.state, .event)'"),
        s.sh("sed -n 3p decisions.jsonl | jq -c .event"),
    )
    out.add("export-end", s.sh("tail -1 decisions.jsonl"))
    out.add("csv", s.sh("shep audit export --format csv --kind decisions"))
    out.add("otlp", s.sh("shep audit export --format otlp-json --output trace.jsonl"))
    out.add(
        "bundle",
        s.sh("shep audit export --format bundle --output audit.tar"),
        s.sh("shep audit verify --bundle audit.tar"),
        s.sh('ssh-keygen -q -t ed25519 -N "" -f key'),
        s.sh("shep audit export --format bundle --output signed.tar --sign-key key"),
        s.sh("shep audit verify --bundle signed.tar"),
    )
    elsewhere = s.root / "elsewhere"
    elsewhere.mkdir()
    count = head_position(s)
    out.add(
        "offline",
        s.sh("shep audit export --output audit.jsonl"),
        s.sh(f"cp audit.jsonl {elsewhere}/ && cd {elsewhere}"),
        s.sh("export SHEP_HOME=/nonexistent"),
        s.sh(
            f"shep audit verify --export audit.jsonl --anchor {count}:{head}",
            cwd=elsewhere,
            env={"SHEP_HOME": "/nonexistent"},
        ),
    )


def head_position(s: Scratch) -> int:
    first = json.loads(s.out("head -1 decisions.jsonl"))
    return int(first["head_position"])


def _supervisor(s: Scratch, out: Transcript) -> None:
    home = s.root / "supervised"
    _build_supervised_history(home, s.root / "supervised-repo")
    env = {"SHEP_HOME": str(home)}
    out.add(
        "sup-export",
        s.sh("shep audit export --kind decisions --output supervised.jsonl", env=env),
        s.sh(
            "jq -c 'select(.verdict) | [.position, .item[:8], .actor, .verdict, "
            ".reason // .answer]' supervised.jsonl"
        ),
    )
    made = _line_of(s.root / "supervised.jsonl", "SupervisorDecisionMade")
    out.add(
        "sup-evidence",
        s.sh(f"sed -n {made}p supervised.jsonl | jq -c 'del(.state, .event)'"),
        s.sh(
            f"sed -n {made}p supervised.jsonl | "
            "jq -c '.event | {model, confidence, rules, acted, input_hash}'"
        ),
    )
    out.add(
        "sup-links",
        s.sh(
            "jq -c 'select(.event.overrides or .event.cosigned_by or .event.decided_by) | "
            "[.position, .actor, .verdict, "
            ".event.overrides // .event.cosigned_by // .event.decided_by]' supervised.jsonl"
        ),
    )
    out.add(
        "sup-csv",
        s.sh(
            "shep audit export --format csv --kind decisions | "
            "grep -E 'SupervisorDecisionMade|user:bob' | head -2",
            env=env,
        ),
    )


def _line_of(path: Path, topic: str) -> int:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if json.loads(line).get("topic", "").endswith(topic):
            return n
    raise ScenarioError(f"{path.name} has no {topic}")


def _build_supervised_history(home: Path, repo: Path) -> None:
    """The history tests/shep/audit/test_supervisor_export.py decides, in a home of its own."""
    if str(CLONE) not in sys.path:
        sys.path.insert(0, str(CLONE))
    builder = importlib.import_module("tests.shep.audit.test_supervisor_export")
    from events.store import EventStore

    home.mkdir(mode=0o700)
    repo.mkdir()
    with EventStore(home / "shep.db") as store:
        builder.supervise_some(store, repo)


def _tampering(s: Scratch, out: Transcript) -> None:
    s.settle()
    out.add(
        "tamper-export",
        *s.lines(
            "offset=$(grep -bo 'and explain' audit.jsonl | head -1 | cut -d: -f1)",
            "printf 'A' | dd of=audit.jsonl bs=1 seek=$offset conv=notrunc status=none",
            "shep audit verify --export audit.jsonl",
            code=4,
            cwd=s.root / "elsewhere",
            env={"SHEP_HOME": "/nonexistent"},
        ),
        Shown("", "echo $?", "4", 0),
    )
    out.add(
        "tamper-store",
        s.sh("""sqlite3 "$SHEP_HOME/shep.db" 'PRAGMA wal_checkpoint(TRUNCATE)'"""),
        *s.lines(
            """offset=$(grep -abo 'migration","policy"' "$SHEP_HOME/shep.db" | cut -d: -f1)""",
            """printf 'M' | dd of="$SHEP_HOME/shep.db" bs=1 seek=$offset conv=notrunc """
            "status=none",
            "shep audit verify",
            code=4,
        ),
        Shown("", "echo $?", "4", 0),
    )
    out.add(
        "damaged-export",
        s.sh("shep audit export --output after.jsonl"),
        s.sh("shep audit verify --export after.jsonl", code=4),
    )
