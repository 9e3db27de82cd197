"""``shep demo``: a first run without any agent CLI installed."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import click

from events.errors import ShepError
from shep.cli.render import Seconds
from shep.runtime import Runtime


@click.command()
@click.option(
    "--delay",
    type=Seconds(0),
    default=0.4,
    show_default=True,
    help="Seconds the demo agent takes per step.",
)
@click.pass_context
def demo(ctx: click.Context, delay: float) -> None:
    """Run analyze-repository on a bundled sample repository with the built-in demo agent.

    Everything happens in a temporary shep home, so your own settings and runs
    are untouched. The demo agent gives canned answers (it is not an AI); it
    shows what a run records: status, logs, the report, the audit chain.
    """

    from commands.configure_agent import configure_agent
    from commands.create_run import create_run
    from shep.cli.logs import logs
    from shep.cli.run import execute_run
    from shep.cli.status import status
    from shep.demo import SAMPLE_REPO
    from shep.identity import current_actor, host_name, process_start
    from shep.workflows import get_workflow

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
    runtime = Runtime(home)
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
    )
    click.echo(
        f"shep demo: analyzing a sample repository with the DEMO agent "
        f"(canned answers, not an AI), in {home}\n"
    )
    execute_run(
        runtime, run_id, resume=False, background=False, timeout=None, exit_on_failure=False
    )
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
