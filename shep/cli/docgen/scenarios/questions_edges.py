"""docs/questions-and-approvals.md's edges: the errors, the rejection warning, notification
commands that fail or hang, the inbox notice turned off.

Its own home and repository, played beside ``questions.py``: E (``two-questions``)
waits on two questions; F is rejected five times, then cancelled at its gate;
G and H each wait on a question when a notification command fails, then hangs.
"""

from __future__ import annotations

from pathlib import Path

from shep.cli.docgen.scenarios import one_item, pending, run_id
from shep.cli.docgen.scenarios.questions import missing, setup
from shep.cli.docgen.scratch import Scratch, Transcript

__all__ = ["missing", "play"]


def play(s: Scratch, out: Transcript) -> None:
    repo = setup(s)
    _errors(s, out, repo)
    _notifications(s, out, repo)


def _errors(s: Scratch, out: Transcript, repo: Path) -> None:
    run_e = run_id(s.sh("shep run two-questions --background", cwd=repo))
    run_f = run_id(s.sh("shep run gated-review --background", cwd=repo))
    s.settle()
    question_e = pending(s, run_e)[0]["item_id"]
    question_f = one_item(s, run_f, "question")["item_id"]
    s.out(f"shep answer {question_f} --option small")
    s.settle()
    gate = one_item(s, run_f, "approval")["item_id"]
    refusals = [
        s.sh(f"shep approve {question_e[:8]}", code=2),
        s.sh(f"shep answer {gate[:8]} --option small", code=2),
        s.sh("shep answer 4242abcd --option small", code=2),
        s.sh(f"shep answer {run_f[:8]} --option small", code=2),
        s.sh(f"shep answer {run_e[:8]} --option x", code=2),
        s.sh(f"shep answer {question_e[:8]} --option medium", code=2),
        s.sh(f"shep answer {question_e[:8]}", code=2),
        s.sh(f"shep reject {run_f[:8]}", code=2),
    ]
    out.add("errors", *refusals, gap=True)
    for n in range(1, 6):
        s.settle()
        reject = s.sh(f'shep reject {run_f[:8]} --reason "Still too vague ({n})."')
    out.add("reject-warning", reject)
    s.settle()
    gate = one_item(s, run_f, "approval")["item_id"]
    s.out(f"shep cancel {run_f[:8]}")
    s.settle()
    out.add("cancelled-item", s.sh(f"shep approve {gate[:8]}", code=2))
    for item in pending(s, run_e):
        s.out(f"shep answer {item['item_id']} --option x")
    s.settle()


def _notifications(s: Scratch, out: Transcript, repo: Path) -> None:
    out.add(
        "notify-unparsable",
        s.sh("""shep settings set notify_command 'curl -d @- "unterminated'""", code=2),
    )
    failing = s.sh(
        "shep settings set notify_command \"sh -c 'echo chat.example.com is down >&2; exit 6'\""
    )
    run_g = run_id(s.sh("shep run gated-review --background", cwd=repo))
    s.settle()
    failed = s.sh(f"shep logs {run_g[:8]} | grep -A1 waiting_answer")
    out.add("notify-failed", failing, failed, gap=True)
    s.out(f"shep cancel {run_g[:8]}")
    out.add(
        "notify-hanging",
        s.sh("shep settings set notify_timeout 1"),
        s.sh("shep settings set notify_command 'sleep 60'"),
    )
    run_h = run_id(s.sh("shep run gated-review --background", cwd=repo))
    s.settle()
    out.add("notify-timeout", s.sh(f"shep logs {run_h[:8]} | grep -A1 waiting_answer"))
    out.add("notify-off", s.sh("shep settings set notify_command ''"))
    out.add("notice-off", s.sh("shep settings set inbox_notice off"))
    s.out(f"shep cancel {run_h[:8]}")
    s.settle()
