"""``shep demo``: a first run without any agent CLI installed."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import click

from events.errors import ShepError
from events.inbox_status import ItemKind
from shep.cli.render import Seconds
from shep.home.runtime import Runtime


@click.command()
@click.argument("what", type=click.Choice(["analyze", "feature"]), default="analyze")
@click.option(
    "--delay",
    type=Seconds(0),
    default=0.4,
    show_default=True,
    help="Seconds the demo agent takes per step.",
)
@click.pass_context
def demo(ctx: click.Context, what: str, delay: float) -> None:
    """Show shep on a bundled sample repository with the built-in demo agent.

    `shep demo` (analyze) runs analyze-repository. `shep demo feature` takes a
    feature from a one-line description through requirements (with a question),
    research, plan, tasks, tests and the approval gates to a merged commit,
    answering and approving as you would, each command shown with its output.

    Nothing waits for a key: on a terminal or piped into another program, the
    demo decides by itself and finishes what it started. Everything happens in a
    temporary shep home, so your own settings and runs are untouched. The demo
    agent gives canned answers (it is not an AI).
    """
    from commands.configure_agent import configure_agent
    from shep.demo import SAMPLE_REPO
    from shep.home.identity import current_actor

    try:
        tempfile.gettempdir().encode()  # the demo's home is recorded as text in events
    except UnicodeEncodeError as e:
        raise ShepError(
            f"The temporary directory {os.fsencode(tempfile.gettempdir())!r} is not valid "
            "UTF-8. Point TMPDIR at a directory whose path is valid UTF-8."
        ) from e
    home = Path(tempfile.mkdtemp(prefix="shep-demo-"))
    home.chmod(0o700)
    repo = home / "inventory"
    shutil.copytree(SAMPLE_REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    from shep.cli.render import say_on_stderr

    runtime = Runtime(home, say=say_on_stderr)
    ctx.call_on_close(runtime.close)
    os.environ["SHEP_DEMO_DELAY"] = str(delay)
    store = runtime.store()
    configure_agent(
        store,
        agent_type="demo",
        auth_method="session",
        configured_by=current_actor(),
        binary_version="built-in",
    )
    with _outliving_its_reader():
        if what == "feature":
            _feature_demo(ctx, runtime, home, repo)
        else:
            _analyze_demo(ctx, runtime, home, repo)


@contextlib.contextmanager
def _outliving_its_reader() -> Iterator[None]:
    """Stdout and stderr that outlive their reader: `shep demo feature | head` still
    takes the feature to its merge (a demo left half-run is worse than one that goes
    quiet), it only stops printing once the reader has gone.
    """
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Unbroken(sys.stdout), _Unbroken(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = streams


class _Unbroken:
    """A text stream whose writes go nowhere, quietly, once its reader is gone."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                self._stream.write(text)
            except BrokenPipeError:
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        # Whatever is still buffered (and flushed at exit) goes to /dev/null, not an error.
        self._gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _analyze_demo(ctx: click.Context, runtime: Runtime, home: Path, repo: Path) -> None:
    from commands.create_run import create_run
    from shep.cli.logs import logs
    from shep.cli.run import render_outcome
    from shep.cli.status import status
    from shep.home.identity import current_actor, host_name
    from shep.home.procs import process_start
    from shep.runs.launch import execute_run
    from shep.workflows import get_workflow
    from shep.workflows.shape import pin_fields

    store = runtime.store()
    workflow = get_workflow("analyze-repository")
    run_id = create_run(
        store,
        workflow=workflow.name,
        agent_type="demo",
        repo=str(repo),
        node_names=workflow.node_names,
        created_by=current_actor(),
        pid=os.getpid(),
        host=host_name(),
        process_start=process_start(os.getpid()),
        **pin_fields(workflow, runtime.home),
    )
    click.echo(
        f"shep demo: analyzing a sample repository with the DEMO agent "
        f"(canned answers, not an AI), in {home}\n"
    )
    outcome = execute_run(runtime, run_id, resume=False, background=False, timeout=None)
    render_outcome(outcome, background=False, exit_on_failure=False, runtime=runtime)
    short = run_id.hex[:8]
    click.echo("\n$ shep status")
    with click.Context(status, obj=runtime, info_name="status", parent=ctx) as sub:
        sub.invoke(status, run=None, show_all=False, as_json=False)
    click.echo(f"\n$ shep logs {short}")
    with click.Context(logs, obj=runtime, info_name="logs", parent=ctx) as sub:
        sub.invoke(logs, run=short, follow=False, as_json=False)
    click.echo(
        f"\nThe report is {repo / 'shep-analysis.md'}.\n"
        "Try next:\n"
        f"  SHEP_HOME={home} shep status {short}      # the run and its nodes\n"
        f"  SHEP_HOME={home} shep audit verify        # prove the log was not edited\n"
        "  shep settings agent                       # choose your real agent CLI\n"
        "  shep run analyze-repository --repo PATH   # analyze your own repository"
    )


#: What the feature demo asks for.
DEMO_FEATURE = "Add a low-stock report listing items below their reorder level"


def _feature_demo(ctx: click.Context, runtime: Runtime, home: Path, repo: Path) -> None:
    """feat new, then answer and approve what it asks (the recommended option) until it ends."""
    from commands.run_state import load_run
    from events.runs import WAITING_STATUSES
    from projections.catch_up import catch_up
    from projections.inbox_queries import list_inbox
    from shep.cli.feat import new
    from shep.cli.inbox import answer, approve, inbox
    from shep.cli.logs import logs
    from shep.git.command import run_git

    env = {"GIT_AUTHOR_NAME": "demo", "GIT_AUTHOR_EMAIL": "demo@localhost"}
    env |= {"GIT_COMMITTER_NAME": "demo", "GIT_COMMITTER_EMAIL": "demo@localhost"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "Inventory"]):
        run_git(repo, *args, env=env, doing="make the demo repository")
    click.echo(
        "shep demo feature: a feature from a description to a merged commit, with the DEMO "
        f"agent (canned answers, not an AI), in {home}\n"
    )
    click.echo(f'$ shep feat new "{DEMO_FEATURE}" --repo {repo}')
    with click.Context(new, obj=runtime, info_name="new", parent=ctx) as sub:
        sub.invoke(new, description=DEMO_FEATURE, repo=repo)
    store = runtime.store()
    run_id = next(iter(_feature_runs(runtime)))
    short = run_id.hex[:8]
    for _ in range(20):  # every gate and question of one feature, with room to spare
        if load_run(store, run_id).status not in WAITING_STATUSES:
            break
        conn = runtime.read_db()
        catch_up(conn)
        item = list_inbox(conn, run_id=run_id.hex)[0]
        # Naming the run lists its items: on a terminal, bare `shep inbox` is the picker,
        # which would wait for a key the demo never types.
        click.echo(f"\n$ shep inbox --run {short}")
        with click.Context(inbox, obj=runtime, info_name="inbox", parent=ctx) as sub:
            sub.invoke(inbox, as_json=False, repo=None, run_ref=short)
        ref = item["item_id"][:8]
        if item["kind"] == ItemKind.QUESTION:
            option = next(o for o in item["options"] if o.get("recommended"))
            click.echo(f"\n$ shep answer {ref} --option {option['id']} --wait")
            with click.Context(answer, obj=runtime, info_name="answer", parent=ctx) as sub:
                sub.invoke(answer, item_ref=ref, option_id=option["id"], wait=True)
        else:
            click.echo(f"\n$ shep approve {ref} --wait")
            with click.Context(approve, obj=runtime, info_name="approve", parent=ctx) as sub:
                sub.invoke(approve, item_ref=ref, comment="", wait=True)
    click.echo(f"\n$ shep logs {short}")
    with click.Context(logs, obj=runtime, info_name="logs", parent=ctx) as sub:
        sub.invoke(logs, run=short, follow=False, as_json=False)
    click.echo(f"\n$ git -C {repo} log --stat -1")
    shown = run_git(repo, "log", "--stat", "-1", doing="show the merged commit", ok=range(256))
    click.echo(shown.stdout.rstrip())
    click.echo(
        "\nTry next:\n"
        f"  SHEP_HOME={home} shep feat show {short}   # phases, timings, snapshots\n"
        f"  SHEP_HOME={home} shep audit verify        # prove the log was not edited\n"
        "  shep settings agent                       # choose your real agent CLI\n"
        '  shep feat new "DESCRIPTION"               # a feature in your own repository'
    )


def _feature_runs(runtime: Runtime) -> list[Any]:
    from uuid import UUID

    from events.features import FEATURE_WORKFLOW_NAMES
    from projections.catch_up import catch_up
    from projections.queries import list_runs

    conn = runtime.read_db()
    catch_up(conn)
    return [UUID(r["run_id"]) for r in list_runs(conn) if r["workflow"] in FEATURE_WORKFLOW_NAMES]
