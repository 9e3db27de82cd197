"""A fake `claude` CLI for the supervisor's evaluator; workflow steps go to the fake claude.

Installed as the configured claude-code binary (``install``), it reads the
prompt from stdin. A prompt that starts with "You are shep's supervisor" is
the supervisor's: it is answered with a JSON verdict, in the format asked for
(``--output-format json``, or ``stream-json``). Any other prompt is a workflow
step: ``tests/shep/runs/fake_claude.py`` answers it (with ``FAKE_AGENT_FAIL`` as
its ``FAKE_FAIL``), so one binary serves the workflow and the supervisor.

The verdict, by environment variable:

- ``FAKE_VERDICT``: the reply's text (default: an approval with a rationale);
  ``FAKE_VERDICT_QUESTION`` / ``FAKE_VERDICT_GATE`` replace it for questions /
  approval gates.
- ``FAKE_FAIL``: ``hang`` (sleep until killed), ``crash`` (exit 3 with a line
  on stderr), ``garbage`` (a result with no JSON in it).
- ``FAKE_EVALUATOR_DELAY``: seconds to wait before replying (default 0).
- ``FAKE_HOLD``: a path; while a file is there, the evaluator waits before
  replying (a test holds it mid-evaluation, then lets it go).

Every supervisor call is appended to ``FAKE_EVALUATOR_LOG`` (JSON lines: phase
start|done, pid, time, argv, model, the whole prompt), fsynced before the fake
hangs, so a test can wait for a call it then interrupts.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

SUPERVISOR_PROMPT = "You are shep's supervisor"
DEFAULT_VERDICT = json.dumps(
    {"verdict": "approve", "rationale": "The fake evaluator approves.", "confidence": 0.9}
)
ROOT = Path(__file__).resolve().parents[3]


def install(directory: Path) -> Path:
    """Write the fake as an executable ``claude`` in ``directory``; its path."""
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "claude"
    binary.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.shep.supervisor.fake_evaluator import main\n"
        "sys.exit(main())\n"
    )
    binary.chmod(0o755)
    return binary


def calls(path: Path) -> list[dict[str, Any]]:
    """The supervisor calls logged so far (``FAKE_EVALUATOR_LOG``)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _log(**fields: object) -> None:
    path = os.environ.get("FAKE_EVALUATOR_LOG")
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps({**fields, "pid": os.getpid(), "time": time.time()}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _option(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def _emit(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _reply(prompt: str) -> str:
    failure = os.environ.get("FAKE_FAIL", "")
    if failure == "garbage":
        return "Looks fine to me, I suppose. Ship it?"
    question = "\nThe question to decide" in prompt
    specific = os.environ.get("FAKE_VERDICT_QUESTION" if question else "FAKE_VERDICT_GATE")
    return specific or os.environ.get("FAKE_VERDICT") or DEFAULT_VERDICT


def _evaluate(prompt: str) -> int:
    model = _option("--model")
    _log(phase="start", argv=sys.argv[1:], model=model, prompt=prompt, cwd=os.getcwd())
    failure = os.environ.get("FAKE_FAIL", "")
    if failure == "hang":
        while True:
            time.sleep(1)
    if failure == "crash":
        sys.stderr.write("fake evaluator: segmentation fault (simulated)\n")
        return 3
    time.sleep(float(os.environ.get("FAKE_EVALUATOR_DELAY", "0")))
    hold = os.environ.get("FAKE_HOLD")
    while hold and os.path.exists(hold):
        time.sleep(0.02)
    text = _reply(prompt)
    session = str(uuid.uuid4())
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "api_error_status": None,
        "duration_ms": 5,
        "num_turns": 1,
        "result": text,
        "session_id": session,
        "total_cost_usd": 0.0001,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    if _option("--output-format") == "stream-json":
        _emit({"type": "system", "subtype": "init", "session_id": session, "model": "fake"})
        _emit(
            {
                "type": "assistant",
                "message": {
                    "id": "m1",
                    "model": "fake",
                    "content": [{"type": "text", "text": text}],
                },
                "session_id": session,
            }
        )
        _emit(result)
    else:
        sys.stdout.write(json.dumps(result))
        sys.stdout.flush()
    _log(phase="done", reply=text)
    return 0


def main() -> int:
    if "--version" in sys.argv:
        print("2.1.197 (Claude Code)")
        return 0
    prompt = sys.stdin.read()
    if prompt.startswith(SUPERVISOR_PROMPT):
        return _evaluate(prompt)
    # A workflow step: the fake claude answers it, with its own failure mode.
    os.environ.pop("FAKE_FAIL", None)
    if os.environ.get("FAKE_AGENT_FAIL"):
        os.environ["FAKE_FAIL"] = os.environ["FAKE_AGENT_FAIL"]
    from tests.shep.runs import fake_claude

    sys.stdin = io.StringIO(prompt)
    return fake_claude.main()


if __name__ == "__main__":
    sys.exit(main())
