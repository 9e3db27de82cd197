"""`shep run analyze-repository` end to end, with a fake claude as a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.shep.runs.conftest import agent_calls
from tests.support.cli import shep


def test_run_without_agent_is_one_line(repo: Path) -> None:
    """No agent configured: the message says how to configure one, exit 2."""
    result = shep("run", "analyze-repository", "--repo", str(repo))
    assert result.returncode == 2
    assert result.stderr == "shep: No agent configured. Run `shep settings agent`.\n"


def test_analyze_repository_completes_and_writes_report(
    repo: Path, fake_claude: Path, agent_log: Path
) -> None:
    """All four nodes run once in order, the session carries over, shep writes the report."""
    result = shep("run", "analyze-repository", "--repo", str(repo), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "completed" in result.stderr
    report = (repo / "shep-analysis.md").read_text()
    assert report.startswith("# Repository analysis: fake")
    calls = agent_calls(agent_log)
    assert [(c["node"], c["phase"]) for c in calls] == [
        (n, p) for n in ("scan", "dependencies", "patterns", "report") for p in ("start", "done")
    ]
    starts = [c for c in calls if c["phase"] == "start"]
    assert starts[0]["resume"] is None
    assert all(s["resume"] for s in starts[1:]), "later nodes resume the agent's session"
    runs = json.loads(shep("status", "--all", "--json", check=True).stdout)
    assert len(runs) == 1
    assert runs[0]["status"] == "completed"
    assert (runs[0]["completed_nodes"], runs[0]["total_nodes"]) == (4, 4)
    detail = json.loads(shep("status", runs[0]["run_id"], "--json", check=True).stdout)
    assert {n["node"]: n["status"] for n in detail["nodes"]} == dict.fromkeys(
        ("scan", "dependencies", "patterns", "report"), "completed"
    )
    assert all(n["agent_session_id"] for n in detail["nodes"])
    logs = shep("logs", runs[0]["run_id"], "--json", check=True).stdout.splitlines()
    kinds = [json.loads(line)["kind"] for line in logs]
    assert kinds[0] == "run.created"
    assert kinds[-1] == "run.completed"
    assert kinds.count("node.completed") == 4
    assert "artifact" in kinds
    assert shep("audit", "verify", check=True).stdout.startswith("OK: ")


def test_agent_written_report_is_kept(
    repo: Path, fake_claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the agent wrote shep-analysis.md itself, shep keeps it and records who wrote it."""
    monkeypatch.setenv("FAKE_WRITE_REPORT", "1")
    result = shep("run", "analyze-repository", "--repo", str(repo), timeout=120)
    assert result.returncode == 0, result.stderr
    assert (repo / "shep-analysis.md").read_text() == "# Written by the agent itself\n"
    run_id = json.loads(shep("status", "--all", "--json").stdout)[0]["run_id"]
    artifact = [
        json.loads(x)
        for x in shep("logs", run_id, "--json").stdout.splitlines()
        if json.loads(x)["kind"] == "artifact"
    ]
    assert len(artifact) == 1
    assert "shep-analysis.md" in artifact[0]["message"]


@pytest.mark.slow
def test_the_report_is_never_written_or_read_through_a_symbolic_link(
    repo: Path, fake_claude: Path, tmp_path: Path
) -> None:
    """The repository holds links where shep writes its report (the report itself, and its
    temporary file) pointing at files outside it: both outside files keep their bytes,
    the report is a plain file in the repository, and its recorded hash is the report's.
    """
    import hashlib

    outside = tmp_path / "outside"
    outside.mkdir()
    notes, victim = outside / "notes.md", outside / "victim.txt"
    notes.write_text("the user's notes\n")
    victim.write_text("the user's file\n")
    (repo / "shep-analysis.md").symlink_to(notes)
    (repo / ".shep-analysis.md.shep-tmp").symlink_to(victim)
    result = shep("run", "analyze-repository", "--repo", str(repo), timeout=120)
    assert result.returncode == 0, result.stderr
    assert notes.read_text() == "the user's notes\n"
    assert victim.read_text() == "the user's file\n"
    report = repo / "shep-analysis.md"
    assert not report.is_symlink()
    assert report.read_text().startswith("# Repository analysis")
    run_id = json.loads(shep("status", "--all", "--json").stdout)[0]["run_id"]
    logged = shep("logs", run_id, "--json").stdout
    assert hashlib.sha256(report.read_bytes()).hexdigest()[:12] in logged


def test_auth_error_fails_the_run_without_retry(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 401 is not retried: the node and the run fail, exit 1, with the agent's message."""
    monkeypatch.setenv("FAKE_FAIL", "401")
    result = shep("run", "analyze-repository", "--repo", str(repo), timeout=120)
    assert result.returncode == 1
    assert "Invalid API key" in result.stderr
    assert "Traceback" not in result.stderr
    assert len([c for c in agent_calls(agent_log) if c["phase"] == "start"]) == 1
    run = json.loads(shep("status", "--all", "--json").stdout)[0]
    assert run["status"] == "failed"
    assert run["error"].startswith("AgentAuthError: ")
    # The run's failure names the node it failed in, as its NodeFailed does.
    logged = [
        json.loads(line)
        for line in shep("logs", run["run_id"], "--json").stdout.split("\n")
        if line
    ]
    [failed] = [e for e in logged if e["kind"] == "run.failed"]
    assert failed["node"] == "scan", failed


@pytest.mark.slow
def test_the_output_cap_is_the_agent_output_mib_setting(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agent_output_mib` is validated and reaches the worker's agent calls: a 2 MiB line
    fails the run under a 1 MiB cap, with the setting named in the error; at 3 MiB the same
    agent completes.
    """
    refused = shep("settings", "set", "agent_output_mib", "0")
    assert (refused.returncode, refused.stderr) == (
        2,
        "shep: agent_output_mib must be a whole number from 1 to 4096, not '0'.\n",
    )
    monkeypatch.setenv("FAKE_NOISE_MB", "2")
    shep("settings", "set", "agent_output_mib", "1", check=True)
    failed = shep("run", "analyze-repository", "--repo", str(repo), timeout=120)
    assert failed.returncode == 1
    assert "printed a line of more than 1 MiB" in failed.stderr
    assert "shep settings set agent_output_mib N" in failed.stderr
    assert "Traceback" not in failed.stderr
    shep("settings", "set", "agent_output_mib", "3", check=True)
    done = shep("run", "analyze-repository", "--repo", str(repo), "--no-resume", timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_overload_is_retried_then_completes(
    repo: Path, fake_claude: Path, agent_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 529 on each node's first call is retried; the run completes with attempt 2 recorded."""
    monkeypatch.setenv("FAKE_FAIL", "529-once")
    result = shep("run", "analyze-repository", "--repo", str(repo), timeout=240)
    assert result.returncode == 0, result.stderr
    starts = [c["node"] for c in agent_calls(agent_log) if c["phase"] == "start"]
    assert starts == [
        "scan",
        "scan",
        "dependencies",
        "dependencies",
        "patterns",
        "patterns",
        "report",
        "report",
    ]
    run_id = json.loads(shep("status", "--all", "--json").stdout)[0]["run_id"]
    kinds = [json.loads(x)["kind"] for x in shep("logs", run_id, "--json").stdout.splitlines()]
    assert kinds.count("node.failed") == 4
    assert kinds.count("node.completed") == 4


@pytest.mark.slow
def test_timeout_kills_agent_and_fails_node(
    repo: Path, fake_claude: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--timeout bounds each agent call: the hung agent is killed and the run fails."""
    monkeypatch.setenv("FAKE_FAIL", "hang")
    result = shep("run", "analyze-repository", "--repo", str(repo), "--timeout", "1", timeout=120)
    assert result.returncode == 1
    run = json.loads(shep("status", "--all", "--json").stdout)[0]
    assert run["status"] == "failed"
    assert run["error"].startswith("AgentTimeoutError")


@pytest.mark.slow
def test_unwritable_repository_interrupts_the_run_resumably(
    repo: Path, fake_claude: Path, agent_log: Path
) -> None:
    """If shep cannot write the report, the run is interrupted (resumable) with one clear line;
    once the repository is writable, resume writes it without redoing the analysis."""
    import os
    import shutil
    import subprocess

    if os.geteuid() == 0 and shutil.which("chattr") is None:
        pytest.skip("root without chattr cannot make a directory read-only")
    lock = ["chattr", "+i", str(repo)] if os.geteuid() == 0 else None
    if lock:
        subprocess.run(lock, check=True)
    else:
        repo.chmod(0o500)
    try:
        result = shep("run", "analyze-repository", "--repo", str(repo), timeout=120)
    finally:
        if lock:
            subprocess.run(["chattr", "-i", str(repo)], check=True)
        repo.chmod(0o755)
    assert result.returncode == 1
    assert f"shep: Cannot write {repo / 'shep-analysis.md'}" in result.stderr
    assert "Traceback" not in result.stderr
    run = json.loads(shep("status", "--all", "--json").stdout)[0]
    assert run["status"] == "interrupted"
    assert shep("resume", run["run_id"], timeout=120).returncode == 0
    assert (repo / "shep-analysis.md").read_text().startswith("# Repository analysis")
    starts = [c["node"] for c in agent_calls(agent_log) if c["phase"] == "start"]
    assert starts == ["scan", "dependencies", "patterns", "report", "report"]


@pytest.mark.slow
def test_a_directory_where_the_report_goes_interrupts_the_run_with_the_way_out(
    repo: Path, fake_claude: Path, agent_log: Path
) -> None:
    """A directory named like the report: the run is interrupted (resumable) with one line
    that says to move it (not to make the repository writable: it is), nothing is left
    beside it, and once it is moved, resume writes the report without redoing the analysis."""
    (repo / "shep-analysis.md").mkdir()
    (repo / "shep-analysis.md" / "notes.txt").write_text("the user's\n")
    result = shep("run", "analyze-repository", "--repo", str(repo), timeout=120)
    assert result.returncode == 1
    [line] = [x for x in result.stderr.splitlines() if x.startswith("shep: Cannot write")]
    assert "Move that directory away" in line
    assert "writable" not in line
    assert "Traceback" not in result.stderr
    assert not (repo / ".shep-analysis.md.shep-tmp").exists()
    run = json.loads(shep("status", "--all", "--json").stdout)[0]
    assert run["status"] == "interrupted"
    (repo / "shep-analysis.md").rename(repo / "notes")
    assert shep("resume", run["run_id"], timeout=120).returncode == 0
    assert (repo / "shep-analysis.md").read_text().startswith("# Repository analysis")
    starts = [c["node"] for c in agent_calls(agent_log) if c["phase"] == "start"]
    assert starts == ["scan", "dependencies", "patterns", "report", "report"]
