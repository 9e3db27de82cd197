"""``shep run analyze-repository`` end to end with the REAL agent CLIs, as a user runs it.

Per CLI: ``shep settings agent --auth token --token-stdin --binary <real binary>``, then
``shep run analyze-repository`` as a subprocess, with the CLI in an isolated HOME
(``clis.prepare``) talking only to the scripted LLM on 127.0.0.1. The server takes one
scripted reply per model turn and requires shep's token, so a passing run also proves the
token went from ``$SHEP_HOME/secrets`` to the CLI. Then status, logs and the audit chain
are read back through the CLI, and the server's records show how the later steps carried
the earlier ones: by resuming the agent's session, or (agents without resume) by
embedding the earlier results in the prompt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakellm import FakeLLM, RecordedRequest
from tests.support.real_clis import AGENTS, TOKEN, CliSetup

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(420)]

NODES = ("scan", "dependencies", "patterns", "report")
# A phrase of each node's instruction (shep/workflows/analyze_repository.py), to find its request.
INSTRUCTION = {
    "scan": "Describe its structure",
    "dependencies": "List the project's dependencies",
    "patterns": "Describe the architecture and code patterns",
    "report": "Write the final analysis",
}
# What the fake LLM answers per node. No file names in them: aider offers to add files it
# sees mentioned in a reply (and, with --yes-always, would ask the model again).
ANSWERS = {
    "scan": "SCAN-7f3a: a tiny Python application with one entry point and no tests.",
    "dependencies": "DEPS-19c2: no runtime dependencies are declared; nothing is pinned.",
    "patterns": "PATTERNS-c4e8: a single script, no layering, no error handling.",
}
REPORT = (
    "# Repository analysis: work\n\n"
    "REPORT-a91d: a one-script Python application.\n\n"
    "## Recommendations\n\n1. Add tests.\n2. Declare dependencies.\n"
)
AGENT_REPORT = "# Repository analysis: work\n\nREPORT-5b0e: written by the agent's Write tool.\n"
AGENT_DONE = "DONE-0e6d: I saved the analysis."
EMBEDDED = "Earlier steps of this workflow produced the results below"
# Agents that report a session id and that shep resumes by id (docs/agents.md).
RESUMABLE = {"claude-code", "codex", "gemini-cli", "qwen-code", "opencode"}
# Inherited variables that would send the CLIs (or their keys) elsewhere.
_FOREIGN_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "CONTINUE_API_KEY",
    "SHEP_DEBUG",
)


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """The scripted LLM; it answers 401 to any key but shep's token."""
    with FakeLLM(api_key=TOKEN) as llm:
        yield llm


class Shep:
    """``python -m shep`` in a private SHEP_HOME, with the CLI's offline environment."""

    def __init__(self, cli: CliSetup, home: Path, *, term: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV}
        child = cli.child_env()
        del child[cli.token_env]  # the token reaches the CLI only through shep's secrets
        child["PATH"] = os.pathsep.join([child["PATH"], env.get("PATH", "")])
        if term is not None:
            child["TERM"] = term
        self.env = {**env, **child, "SHEP_HOME": str(home)}
        self.cwd = cli.cwd

    def __call__(
        self, *args: str, stdin: str | None = None, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        try:
            result = subprocess.run(
                [sys.executable, "-m", "shep", *args],
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                env=self.env,
                cwd=self.cwd,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise AssertionError(
                f"shep {' '.join(args)} ran past {timeout}s\nstderr: {e.stderr!r}"
            ) from None
        if check and result.returncode != 0:
            raise AssertionError(
                f"shep {' '.join(args)} exited {result.returncode}\n"
                f"stdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}"
            )
        return result


def _repo(cli: CliSetup) -> Path:
    """A small repository in the CLI's project directory (codex trusts exactly that one)."""
    repo = cli.cwd
    (repo / "src").mkdir(exist_ok=True)
    (repo / "src" / "app.py").write_text("print('hello')\n")
    (repo / "pyproject.toml").write_text("[project]\nname = 'app'\nversion = '0.1.0'\n")
    return repo


def _node_requests(llm: FakeLLM) -> dict[str, list[RecordedRequest]]:
    """The model requests of each node: a request belongs to the last instruction it carries."""
    by_node: dict[str, list[RecordedRequest]] = {n: [] for n in NODES}
    for request in llm.model_requests:
        text = request.dumps()
        found = [n for n in NODES if json.dumps(INSTRUCTION[n])[1:-1] in text]
        assert found, f"a model request that no node's prompt is in: {text[:500]}"
        by_node[found[-1]].append(request)
    return by_node


def _describe(llm: FakeLLM) -> str:
    return "\n".join(
        f"  {r.method} {r.path} [{r.api}{' aux' if r.aux else ''}] -> {r.outcome}"
        for r in llm.requests
    )


def _run_analysis(
    agent: str,
    cli: CliSetup,
    llm: FakeLLM,
    tmp_path: Path,
    *,
    agent_writes: bool = False,
    term: str | None = None,
) -> tuple[Shep, Path, dict[str, Any]]:
    """Configure shep for the real CLI, run analyze-repository, check the shared outcomes."""
    repo = _repo(cli)
    shep = Shep(cli, tmp_path / "shep-home", term=term)
    for node in ("scan", "dependencies", "patterns"):
        llm.enqueue_text(ANSWERS[node])
    if agent_writes:
        target = str(repo / "shep-analysis.md")
        llm.enqueue_tool_call("Write", {"file_path": target, "content": AGENT_REPORT})
        llm.enqueue_text(AGENT_DONE)
    else:
        llm.enqueue_text(REPORT)

    configured = shep(
        "settings",
        "agent",
        "--agent",
        agent,
        "--auth",
        "token",
        "--token-stdin",
        "--binary",
        str(cli.binary),
        stdin=TOKEN + "\n",
    )
    assert configured.stdout.startswith(f"Configured {agent} "), configured.stdout
    assert TOKEN not in configured.stdout + configured.stderr

    run_args = ("run", "analyze-repository", "--repo", str(repo), "--timeout", "90")
    ran = shep(*run_args, timeout=360, check=False)
    assert ran.returncode == 0, (
        f"shep run exited {ran.returncode}\nstderr: {ran.stderr[-4000:]}\n"
        f"requests:\n{_describe(llm)}"
    )
    assert "completed" in ran.stderr
    assert TOKEN not in ran.stdout + ran.stderr

    # Every model call carried shep's token (the server would have answered 401 otherwise).
    calls = llm.model_requests
    assert calls
    assert all(c.api_key == TOKEN for c in calls)
    assert llm.pending() == 0, f"scripted replies left over:\n{_describe(llm)}"

    runs = json.loads(shep("status", "--all", "--json").stdout)
    assert len(runs) == 1
    run = runs[0]
    assert run["status"] == "completed", run
    assert run["agent_type"] == agent
    assert (run["completed_nodes"], run["total_nodes"]) == (4, 4)
    detail = json.loads(shep("status", run["run_id"], "--json").stdout)
    nodes = {n["node"]: n for n in detail["nodes"]}
    assert {n: nodes[n]["status"] for n in NODES} == dict.fromkeys(NODES, "completed")
    if agent in RESUMABLE:
        sessions = {nodes[n]["agent_session_id"] for n in NODES}
        assert all(sessions), nodes
        assert len(sessions) == 1, f"the later nodes did not continue the session: {sessions}"
        assert run["agent_session_id"] in sessions, run

    lines = [json.loads(x) for x in shep("logs", run["run_id"], "--json").stdout.splitlines()]
    kinds = [line["kind"] for line in lines]
    assert kinds[0] == "run.created"
    assert kinds[-1] == "run.completed"
    assert [line["node"] for line in lines if line["kind"] == "node.completed"] == list(NODES)
    artifacts = [line for line in lines if line["kind"] == "artifact"]
    assert len(artifacts) == 1
    assert artifacts[0]["node"] == "report"
    assert str(repo / "shep-analysis.md") in artifacts[0]["message"]
    text = "\n".join(str(line.get("message") or "") for line in lines)
    assert ANSWERS["scan"] in text, "the agent's answer is not in the run's log"
    assert TOKEN not in json.dumps(lines)

    audit = shep("audit", "verify")
    assert audit.stdout.startswith("OK: "), audit.stdout

    by_node = _node_requests(llm)
    assert all(by_node[n] for n in NODES), {n: len(r) for n, r in by_node.items()}
    second = by_node["dependencies"][0].dumps()
    if agent in RESUMABLE:
        # The resumed session replays step 1's turns: its prompt and its answer.
        assert json.dumps(INSTRUCTION["scan"])[1:-1] in second
        assert ANSWERS["scan"] in second
        assert EMBEDDED not in second, "shep embedded the results although it could resume"
        last = by_node["report"][-1].dumps()
        assert all(ANSWERS[n] in last for n in ANSWERS), "the report turn lost earlier turns"
    else:
        # No session resume: the later prompts embed the earlier results.
        assert EMBEDDED in second
        assert ANSWERS["scan"] in second
        assert json.dumps(INSTRUCTION["scan"])[1:-1] not in second
        last = by_node["report"][-1].dumps()
        assert all(ANSWERS[n] in last for n in ANSWERS)
    return shep, repo, run


@pytest.mark.parametrize("agent", AGENTS)
def test_run_analyze_repository_with_real_cli(
    agent: str, cli: CliSetup, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """shep run analyze-repository with the real CLI completes 4/4 and writes the report."""
    _, repo, _ = _run_analysis(agent, cli, fake_llm, tmp_path)

    assert (repo / "shep-analysis.md").read_text().strip() == REPORT.strip()
    by_node = _node_requests(fake_llm)
    assert [len(by_node[n]) for n in NODES] == [1, 1, 1, 1], _describe(fake_llm)


@pytest.mark.parametrize("agent", ["claude-code"])
def test_report_written_by_the_agent_is_kept(
    agent: str, cli: CliSetup, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """claude-code's Write tool saves shep-analysis.md in the report step; shep keeps it."""
    _, repo, _ = _run_analysis(agent, cli, fake_llm, tmp_path, agent_writes=True)

    assert (repo / "shep-analysis.md").read_text() == AGENT_REPORT
    report = _node_requests(fake_llm)["report"]
    assert [r.outcome for r in report] == ["tool_call", "text"]
    # The second turn carries the tool's result: the Write really ran, it was not denied.
    tool_result = json.dumps(report[1].body["messages"][-1])
    assert "tool_result" in tool_result
    assert '"is_error": true' not in tool_result, tool_result


@pytest.mark.parametrize("agent", ["aider"])
def test_aider_report_under_a_dumb_terminal(
    agent: str, cli: CliSetup, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """With TERM=dumb (CI, Emacs) aider's answers, and the report, hold only the reply."""
    _, repo, _ = _run_analysis(agent, cli, fake_llm, tmp_path, term="dumb")

    report = (repo / "shep-analysis.md").read_text()
    assert "Aider v" not in report
    assert report.strip() == REPORT.strip()
