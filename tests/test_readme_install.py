"""The README's install command, run as written by bash on a fresh account.

``python3`` is a stand-in on ``PATH`` (its ``-m venv DIR`` makes a ``pip`` that
installs a ``shep`` script), so the line runs in a second, offline, and every
other part of it (the link, the PATH check) is the README's own.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_FAKE_PYTHON = """#!/bin/sh
# python3 -m venv DIR: a venv whose pip "installs" a shep script.
[ "$1" = "-m" ] && [ "$2" = "venv" ] || exit 2
mkdir -p "$3/bin"
cat > "$3/bin/pip" <<EOF
#!/bin/sh
printf '#!/bin/sh\\necho shep-installed\\n' > "$3/bin/shep"
chmod +x "$3/bin/shep"
EOF
chmod +x "$3/bin/pip"
"""


def install_command() -> str:
    """The one command in the README's Install section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Install section has one bash block"
    lines = [line for line in blocks[0].splitlines() if line.strip()]
    assert len(lines) == 1, "the install is one copy-pasteable command"
    return lines[0]


def run_install(home: Path, path: str) -> subprocess.CompletedProcess[str]:
    stand_in = home / "stand-in"
    stand_in.mkdir(parents=True)
    (stand_in / "python3").write_text(_FAKE_PYTHON)
    (stand_in / "python3").chmod(0o755)
    return subprocess.run(
        ["bash", "-c", install_command()],
        cwd=ROOT,
        env={"HOME": str(home), "PATH": f"{stand_in}{os.pathsep}{path}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_fresh_account_is_told_the_line_to_add_to_its_path(tmp_path: Path) -> None:
    """On an account whose PATH lacks ~/.local/bin, the install command links shep there,
    exits 0, and prints the PATH line to add (which then finds the linked shep).
    """
    home = tmp_path / "fresh"
    done = run_install(home, "/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    assert (home / ".local" / "bin" / "shep").is_symlink()
    said = done.stdout + done.stderr
    assert 'export PATH="$HOME/.local/bin:$PATH"' in said, said
    # The line it prints, run in a new shell, puts the linked shep first.
    found = subprocess.run(
        ["bash", "-c", 'export PATH="$HOME/.local/bin:$PATH"; command -v shep'],
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == str(home / ".local" / "bin" / "shep")


def test_an_account_with_local_bin_on_its_path_is_told_nothing(tmp_path: Path) -> None:
    """When ~/.local/bin is already on PATH, the install command prints nothing more."""
    home = tmp_path / "ready"
    done = run_install(home, f"{home / '.local' / 'bin'}{os.pathsep}/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == ""
    assert (home / ".local" / "bin" / "shep").is_symlink()
