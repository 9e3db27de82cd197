"""docs/questions-and-approvals.md's walkthrough and the README's inbox example.

``gated-review`` (tests/support/workflows.py) is draft (agent) -> scope
(question) -> check (deterministic, writes shep-review.md) -> approve (gate on
draft) -> finish (agent); the agent is tests' fake ``claude``. A notification
command (``tee``) collects every new item. The runs:

- A, in the background: the question, a rejection, the second gate, the
  approval, its logs;
- B, in the foreground: answered by naming the run, with free text; its gate
  approved in two terminals at once;
- C: ``--wait`` and ``--as``;
- D: a question with a deadline that passes, a gate approved with ``--wait``.

The errors and the notification failures are ``questions_edges.py``, played
at the same time.
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime
from pathlib import Path

from shep.cli.docgen.scenarios import FAKE_CLAUDE, TEST_WORKFLOWS, git_repo, one_item, run_id
from shep.cli.docgen.scratch import ScenarioError, Scratch, Shown, Transcript

NTFY_SCRIPT = "\n".join(
    [
        "#!/bin/sh",
        "# ~/bin/shep-to-phone: post each new shep inbox item to an ntfy topic.",
        "set -e",
        "item=$(cat)",
        "title=$(printf '%s' \"$item\" | jq -r "
        "'\"shep: \\(.kind) in \\(.workflow), \\(.node) of run \\(.run_id[:8])\"')",
        "body=$(printf '%s' \"$item\" | jq -r "
        "'.prompt, (.commands | (.answer // {})[], .approve // empty, .reject // empty)')",
        'curl -sS --fail --max-time 5 -H "Title: $title" --data-binary "$body" '
        "https://ntfy.sh/my-shep-topic",
        "",
    ]
)

#: Stands in for curl when the script above runs: prints the title and the body it was given.
FAKE_CURL = """\
#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    -H) printf '%s\\n' "${2#Title: }"; shift ;;
    --data-binary) printf '%s\\n' "$2"; shift ;;
  esac
  shift
done
"""


def missing() -> str | None:
    import shutil

    return None if shutil.which("jq") else "jq is not installed"


def setup(s: Scratch) -> Path:
    """tests' fake claude as the agent, the test workflows registered, a small repository."""
    s.install("claude", FAKE_CLAUDE)
    s.env["SHEP_WORKFLOW_MODULES"] = TEST_WORKFLOWS
    repo = git_repo(s, s.root / "myapp")
    s.out("shep settings agent --agent claude-code")
    return repo


def play(s: Scratch, out: Transcript) -> None:
    repo = setup(s)
    items = s.root / "items.jsonl"
    out.add("notify-set", s.sh(f"shep settings set notify_command 'tee -a {items}'"))
    run_a = _walkthrough(s, out, repo)
    _foreground(s, out, repo)
    _wait_and_as(s, out, repo)
    _deadline(s, out, repo)
    out.add("inbox-empty", s.sh("shep inbox"))
    _notified(s, out, items, run_a)


def _walkthrough(s: Scratch, out: Transcript, repo: Path) -> str:
    """Run A, in the background: the question, a rejection, the approval."""
    start = s.sh("shep run gated-review --background", cwd=repo)
    run = run_id(start)
    out.add("run-background", Shown("", f"cd {s.display(str(repo))}", "", 0), start)
    s.settle()
    out.add("status-waiting", s.sh("shep status"))
    out.add("status-run", s.sh(f"shep status {run[:8]}"))
    out.add("inbox-question", s.sh("shep inbox"))
    out.add("inbox-json", s.sh("shep inbox --json"))
    question = one_item(s, run, "question")["item_id"]
    out.add("answer-option", s.sh(f"shep answer {question[:8]} --option small"))
    s.settle()
    out.add("gate", s.sh("shep status"), s.sh("shep inbox"), gap=True)
    out.add("reject", s.sh(f'shep reject {run[:8]} --reason "Also list the tests to change."'))
    s.settle()
    gate_2 = s.sh("shep inbox")
    out.add("gate-again", s.sh(f"shep status {run[:8]}"), gate_2, gap=True)
    at_gate = s.sh("shep status")
    approve = s.sh(f'shep approve {run[:8]} --comment "Plan reads well; tests listed."')
    s.settle()
    out.add("approve", approve, s.sh("shep status"), gap=True)
    out.add("readme-gate", at_gate, gate_2, approve, gap=True)
    out.add("logs", s.sh(f"shep logs {run[:8]}"))
    refused = s.sh(f"shep answer {question[:8]} --option large", code=3)
    out.add("already-decided", refused, Shown("", "echo $?", str(refused.code), 0))
    return run


def _foreground(s: Scratch, out: Transcript, repo: Path) -> None:
    """Run B, in the foreground; answered by naming it; its gate approved twice at once."""
    out.add("run-foreground", s.sh("shep run gated-review", cwd=repo))
    runs = json.loads(s.out("shep status --json 2>/dev/null"))
    run = str(max(runs, key=lambda r: r["created_at"])["run_id"])
    out.add("answer-by-run", s.sh(f'shep answer {run[:8]} "Only the parser module"'))
    s.settle()
    gate = one_item(s, run, "approval")["item_id"]
    out.add("race", *_race(s, f"shep approve {gate[:8]}"), gap=True)
    s.settle()


def _wait_and_as(s: Scratch, out: Transcript, repo: Path) -> None:
    """Run C: carol answers with --wait; a second answer is refused; a bot approves."""
    run = run_id(s.sh("shep run gated-review --background", cwd=repo))
    s.settle()
    question = one_item(s, run, "question")["item_id"]
    out.add("answer-wait", s.sh(f"shep answer {question[:8]} --option large --as carol --wait"))
    out.add(
        "as",
        s.sh(f"shep answer {question[:8]} --option small", code=3),
        s.sh(f"shep approve {run[:8]} --as ci:release-bot"),
        gap=True,
    )
    s.settle()


def _deadline(s: Scratch, out: Transcript, repo: Path) -> None:
    """Run D: its question's deadline passes and the next command applies it."""
    start = s.sh("shep run gated-review --input default_after=10 --background", cwd=repo)
    run = run_id(start)
    s.settle()
    # Shown before the deadline passes (any shep command after it applies it).
    out.add("deadline-inbox", start, s.sh("shep inbox"), gap=True)
    question = one_item(s, run, "question")
    _sleep_past(question["deadline"])
    applied = s.sh("shep status")
    s.settle()
    out.add(
        "deadline-applied",
        applied,
        s.sh(f"shep answer {question['item_id'][:8]} --option large", code=3),
        gap=True,
    )
    gate = one_item(s, run, "approval")["item_id"]
    out.add(
        "gate-wait",
        s.sh(f'shep approve {gate[:8]} --as bob --comment "Fine for a small change." --wait'),
    )
    s.settle()


def _notified(s: Scratch, out: Transcript, items: Path, run: str) -> None:
    """What ``tee`` got for run A's first two items; what the ntfy script makes of the gate."""
    lines = [json.loads(line) for line in s.display(items.read_text()).splitlines()]
    first = [i for i in lines if i["run_id"] == run][:2]
    out.add("notify-items", *(json.dumps(i, indent=2) for i in first), gap=True)
    script = s.root / "user" / "bin" / "shep-to-phone"
    script.parent.mkdir()
    script.write_text(NTFY_SCRIPT)
    script.chmod(0o755)
    fake = s.root / "fakecurl"
    fake.mkdir()
    (fake / "curl").write_text(FAKE_CURL)
    (fake / "curl").chmod(0o755)
    phone = s.sh(
        "~/bin/shep-to-phone",
        env={"PATH": f"{fake}:{s.env['PATH']}"},
        stdin=json.dumps(first[1]),
    )
    out.add("phone-script", NTFY_SCRIPT)
    out.add("phone", phone.output)


def _race(s: Scratch, command: str) -> list[Shown]:
    """``command`` in two terminals at once; the one recorded first is shown first."""
    procs = [
        subprocess.Popen(
            ["bash", "-c", command],
            cwd=s.root,
            env=s.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(2)
    ]
    outputs = [(proc.communicate(timeout=120)[0].decode(), proc.returncode) for proc in procs]
    outputs.sort(key=lambda done: done[1])
    if [code for _, code in outputs] != [0, 3]:
        raise ScenarioError(f"`{command}` twice at once exited {[c for _, c in outputs]}")
    return [
        Shown(f"[terminal {n}] ", s.display(command), s.display(output), code)
        for n, (output, code) in enumerate(outputs, 1)
    ]


def _sleep_past(deadline: str) -> None:
    moment = datetime.fromisoformat(deadline)
    while datetime.now(moment.tzinfo) <= moment:
        time.sleep(0.2)
    time.sleep(0.3)
