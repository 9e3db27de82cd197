"""A ``git`` for tests to put first on PATH: the real git, stopped at a chosen command so a
test can SIGKILL shep there, as a crash would land.

Its rules are a JSON list in the file ``STOPPING_GIT_RULES`` names; each rule:

- ``match``: words that must all be in the command's arguments, the first of them
  being git's command (``["branch", "-D"]``, ``["update-ref", "refs/heads/main"]``);
- ``marker``: a file written when the rule fires, with ``{"pid": ..., "ppid": ...}``
  (this process, and shep's process that ran it); a rule fires once: not when its
  marker exists;
- ``when``: ``after`` (the default): the real git runs to its end, then this process
  sleeps (shep still waits for it); ``holding``: the real git runs with a
  ``reference-transaction`` hook that sleeps while git holds its ref locks
  (``HEAD.lock``, the branch's ``.lock``), the marker then also naming the hook's pid.

Everything else is handed to the real git (``STOPPING_GIT_REAL``) unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _command_index(args: list[str]) -> int:
    """Where git's command is in ``args`` (after ``-C path`` and ``-c name=value``)."""
    i = 0
    while i < len(args) and args[i] in ("-C", "-c"):
        i += 2
    return i


def _write(marker: str, data: dict[str, int]) -> None:
    temporary = f"{marker}.tmp"
    Path(temporary).write_text(json.dumps(data))
    os.replace(temporary, marker)


def main() -> int:
    real = os.environ["STOPPING_GIT_REAL"]
    args = sys.argv[1:]
    at = _command_index(args)
    rules_file = os.environ.get("STOPPING_GIT_RULES", "")
    rules = json.loads(Path(rules_file).read_text()) if rules_file else []
    for rule in rules:
        words = rule["match"]
        if at >= len(args) or args[at] != words[0] or not set(words[1:]) <= set(args[at:]):
            continue
        marker = rule["marker"]
        if os.path.exists(marker):
            continue
        me = {"pid": os.getpid(), "ppid": os.getppid()}
        if rule.get("when") == "holding":
            hooks = Path(f"{marker}.hooks")
            hooks.mkdir(exist_ok=True)
            hook = hooks / "reference-transaction"
            hook.write_text(
                '#!/bin/sh\n[ "$1" = prepared ] || exit 0\n'
                f"{sys.executable} -c 'import json, os, sys; "
                f'd = {json.dumps(me)}; d["hook"] = os.getppid(); '
                f'open(sys.argv[1] + ".tmp", "w").write(json.dumps(d)); '
                f'os.replace(sys.argv[1] + ".tmp", sys.argv[1])\' "{marker}"\n'
                "exec sleep 120\n"
            )
            hook.chmod(0o755)
            held = [*args[:at], "-c", f"core.hooksPath={hooks}", *args[at:]]
            os.execv(real, [real, *held])
        done = subprocess.run([real, *args], check=False)
        _write(marker, me)
        time.sleep(120)
        return done.returncode
    os.execv(real, [real, *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
