"""An interrupted demo says how to go on in the demo's own home, not in $SHEP_HOME."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.cli import shep


def test_an_interrupted_demo_names_its_home_in_the_resume_command(tmp_path: Path) -> None:
    """Ctrl-C in `shep demo` gives a `shep resume` that works as printed: the run lives in
    the demo's temporary home, so the command sets SHEP_HOME to it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    demo = subprocess.Popen(
        [sys.executable, "-m", "shep", "demo", "--delay", "2"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert demo.stderr is not None
        for line in demo.stderr:  # the run has started: its first node is under way
            if "] scan ..." in line:
                break
        demo.send_signal(signal.SIGINT)
        stderr = demo.stderr.read()
        demo.wait(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    found = re.search(r"interrupted\. Continue it with `(.+)`\.", stderr)
    assert found is not None, stderr
    words = shlex.split(found.group(1))
    assert words[0].startswith("SHEP_HOME=")
    home = Path(words[0].removeprefix("SHEP_HOME="))
    assert home.parent == tmp
    assert home.name.startswith("shep-demo-")
    assert words[1:3] == ["shep", "resume"]
    # As pasted: in the demo's home the run is found and goes on to its end.
    resumed = shep(*words[2:], env={"SHEP_HOME": str(home), "SHEP_DEMO_DELAY": "0"})
    assert resumed.returncode == 0, resumed.stderr
    assert f"Run {words[3]} completed." in resumed.stderr
