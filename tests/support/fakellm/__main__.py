"""``python -m tests.support.fakellm [--port N] [--script replies.json]``: run the server by hand.

A script file is a JSON list of replies, taken in order, one per model call:
``{"text": "..."}``, ``{"tool_call": {"name": "Write", "arguments": {...}}, "text": "..."}``,
``{"tool_call": {"name": "apply_patch", "arguments": "*** Begin Patch...", "custom": true}}``,
``{"error": 529, "message": "Overloaded", "times": 3}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

from tests.support.fakellm import DEFAULT_TEXT, FakeLLM


def load_script(llm: FakeLLM, entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        times = entry.get("times", 1)
        if "error" in entry:
            llm.enqueue_error(
                int(entry["error"]), entry.get("body"), message=entry.get("message"), times=times
            )
        elif "tool_call" in entry:
            call = entry["tool_call"]
            llm.enqueue_tool_call(
                call["name"],
                call.get("arguments", {}),
                text=entry.get("text", ""),
                custom=call.get("custom", False),
            )
        else:
            llm.enqueue_text(
                entry.get("text", DEFAULT_TEXT), delay=entry.get("delay", 0.0), times=times
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.fakellm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--text", default=DEFAULT_TEXT, help="the reply when the script is empty")
    parser.add_argument("--script", type=Path, help="a JSON list of replies (see above)")
    parser.add_argument("--api-key", help="answer 401 to any other key")
    parser.add_argument("--quiet", action="store_true", help="do not print each request")
    args = parser.parse_args(argv)
    llm = FakeLLM(
        host=args.host,
        port=args.port,
        default_text=args.text,
        api_key=args.api_key,
        verbose=not args.quiet,
    )
    if args.script:
        load_script(llm, json.loads(args.script.read_text()))
    with llm:
        base = llm.base_url
        print(
            f"fake LLM listening on {base}\n"
            f"  ANTHROPIC_BASE_URL={base}  OPENAI_BASE_URL={base}/v1  "
            f"GOOGLE_GEMINI_BASE_URL={base}\nCtrl-C stops it.",
            flush=True,
        )
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
