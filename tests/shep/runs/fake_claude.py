"""A fake `claude` CLI for workflow tests: speaks `-p --output-format stream-json --verbose`.

It tells the analyze-repository steps apart by their instructions, answers each
after ``FAKE_DELAY`` seconds, and appends what it did to ``FAKE_AGENT_LOG``
(JSON lines: node, phase start|done, wall time, pid, the session it resumed),
so tests can prove which nodes ran when. Misbehaviours, by ``FAKE_FAIL``:
``401`` (an auth error, exit 1), ``529-once`` (overloaded the first time for
each node, then fine; state in ``FAKE_STATE``), ``hang`` (sleep forever).
``FAKE_WRITE_REPORT=1`` makes the report step write shep-analysis.md itself.
``FAKE_NOISE_MB=N`` prints one line of N MiB (not JSON) before each answer.
``FAKE_SUFFIX`` is added to the findings of every step (another take of the same work).
Steps of other workflows are named by a ``[step:NAME]`` marker in the prompt.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid

STEPS = (
    ("report", "Write the final analysis"),
    ("patterns", "Describe the architecture and code patterns"),
    ("dependencies", "List the project's dependencies"),
    ("scan", "Describe its structure"),
)


def log(**fields: object) -> None:
    path = os.environ.get("FAKE_AGENT_LOG")
    if path:
        with open(path, "a") as f:
            f.write(
                json.dumps(
                    {
                        **fields,
                        "time": time.time(),
                        "pid": os.getpid(),
                        "run": os.environ.get("SHEP_RUN_ID"),
                    }
                )
                + "\n"
            )
            f.flush()
            os.fsync(f.fileno())


def emit(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    if "--version" in sys.argv:
        print("2.1.197 (Claude Code)")
        return 0
    prompt = sys.stdin.read()
    task = prompt.split("Your task now")[-1]
    marked = re.search(r"\[step:([\w-]+)\]", task)
    node = next(
        (name for name, phrase in STEPS if phrase in task),
        marked.group(1) if marked else "unknown",
    )
    resumed = sys.argv[sys.argv.index("--resume") + 1] if "--resume" in sys.argv else None
    session = resumed or str(uuid.uuid4())
    log(node=node, phase="start", resume=resumed, prompt=task)
    failure = os.environ.get("FAKE_FAIL", "")
    if failure == "hang":
        emit({"type": "system", "subtype": "init", "session_id": session, "model": "fake"})
        while True:
            time.sleep(1)
    if failure == "401":
        text = "Invalid API key · Fix external API key"
        emit(
            {
                "type": "result",
                "subtype": "success",
                "is_error": True,
                "api_error_status": 401,
                "duration_ms": 5,
                "num_turns": 1,
                "result": text,
                "session_id": session,
                "total_cost_usd": 0,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }
        )
        return 1
    if failure == "529-once":
        state = os.environ["FAKE_STATE"] + "." + node
        if not os.path.exists(state):
            open(state, "w").close()
            text = "API Error: Repeated 529 Overloaded errors. The API is at capacity."
            emit(
                {
                    "type": "result",
                    "subtype": "success",
                    "is_error": True,
                    "api_error_status": None,
                    "duration_ms": 5,
                    "num_turns": 1,
                    "result": text,
                    "session_id": session,
                    "total_cost_usd": 0,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                }
            )
            return 1
    emit(
        {
            "type": "system",
            "subtype": "init",
            "cwd": os.getcwd(),
            "session_id": session,
            "tools": ["Read"],
            "model": "fake-model",
            "permissionMode": "default",
        }
    )
    time.sleep(float(os.environ.get("FAKE_DELAY", "0.05")))
    noise = int(os.environ.get("FAKE_NOISE_MB", "0"))
    if noise:
        sys.stdout.write("x" * (noise << 20) + "\n")
        sys.stdout.flush()
    if node == "report":
        text = "# Repository analysis: fake\n\nSummary from the fake agent.\n\n1. Add tests."
        if os.environ.get("FAKE_WRITE_REPORT") == "1":
            with open(os.path.join(os.getcwd(), "shep-analysis.md"), "w") as f:
                f.write("# Written by the agent itself\n")
    else:
        text = f"Findings of step {node}: line one.\nLine two of {node}."
        text += os.environ.get("FAKE_SUFFIX", "")
    emit(
        {
            "type": "assistant",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "fake-model",
                "content": [{"type": "text", "text": text}],
                "stop_reason": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            },
            "parent_tool_use_id": None,
            "session_id": session,
        }
    )
    emit(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "api_error_status": None,
            "duration_ms": 50,
            "num_turns": 1,
            "result": text,
            "session_id": session,
            "total_cost_usd": 0.001,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }
    )
    log(node=node, phase="done", resume=resumed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
