"""``shep feat``: features, each a run of the feature workflow on its own branch and worktree."""

from __future__ import annotations

import os
from pathlib import Path

import click

from shep.cli.render import Seconds
from shep.home.runtime import Runtime


@click.group()
def feat() -> None:
    """Features: from a description to merged code, each on its own branch and worktree.

    `shep feat new "DESCRIPTION"` makes a branch and a worktree from the base,
    runs the feature workflow there (requirements, research, plan, tasks, tests,
    merge; --fast: straight to the code), stops where a person must decide
    (`shep inbox`), and squash-merges the result into the base once approved.
    """


def _gate_default(value: bool | None, setting: bool, allow_all: bool) -> bool:
    if value is not None:
        return value
    return allow_all or setting


@feat.command("new")
@click.argument("description")
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The repository (any directory in its work tree).",
)
@click.option("--base", help="The branch to start from and merge into (default: the current one).")
@click.option(
    "--fast/--no-fast",
    default=None,
    help="Implement straight from the description, then the merge gate "
    "(default: the feature_fast setting, off).",
)
@click.option("--allow-prd/--no-allow-prd", default=None, help="Skip the requirements gate.")
@click.option("--allow-plan/--no-allow-plan", default=None, help="Skip the plan gate.")
@click.option("--allow-merge/--no-allow-merge", default=None, help="Skip the merge gate.")
@click.option("--allow-all", is_flag=True, help="Skip every gate.")
@click.option("--push", is_flag=True, help="Push the branch before merging it.")
@click.option(
    "--pr",
    is_flag=True,
    help="Push the branch and open a pull request (with gh) instead of merging.",
)
@click.option("--model", help="Model for this feature (overrides the agent's configured model).")
@click.option(
    "--timeout", type=Seconds(1), metavar="SECONDS", help="Time limit of each agent call."
)
@click.option(
    "--background", is_flag=True, help="Run in a detached worker; print the run id and return."
)
@click.pass_obj
def new(
    runtime: Runtime,
    description: str,
    repo: Path,
    base: str | None,
    fast: bool | None,
    allow_prd: bool | None,
    allow_plan: bool | None,
    allow_merge: bool | None,
    allow_all: bool,
    push: bool,
    pr: bool,
    model: str | None,
    timeout: float | None,
    background: bool,
) -> None:
    """Start a feature from DESCRIPTION.

    Returns once the feature waits for you or ends (or at once with
    --background), and says what to do next.
    """
    from shep.agents.registry import require_installed
    from shep.cli.run import render
    from shep.features.start import (
        create_feature_run,
        discard_worktree,
        make_worktree,
        plan_feature,
        settle_worktree,
    )
    from shep.home.identity import current_actor, host_name
    from shep.home.procs import process_start
    from shep.home.secrets import require_token
    from shep.home.settings import load_settings
    from shep.runs.launch import launch

    store = runtime.store()
    settings = load_settings(store)
    agent_type = settings.require_agent()
    require_installed(agent_type, settings.binary)
    require_token(runtime.home, agent_type, configured=settings.token_configured)
    flags = settings.flags
    plan = plan_feature(
        runtime.home,
        repo.expanduser(),
        description,
        base=base,
        prefix=settings.texts["branch_prefix"],
        publish=push or pr,
    )
    plan = make_worktree(plan, drivers=flags["git_filters"])
    try:
        run_id = create_feature_run(
            store,
            plan,
            description=description,
            fast=flags["feature_fast"] if fast is None else fast,
            allow={
                "prd": _gate_default(allow_prd, flags["allow_prd"], allow_all),
                "plan": _gate_default(allow_plan, flags["allow_plan"], allow_all),
                "merge": _gate_default(allow_merge, flags["allow_merge"], allow_all),
            },
            push=push,
            pr=pr,
            agent_type=agent_type,
            model=model or settings.model,
            created_by=current_actor(),
            host=host_name(),
            process_start=process_start(os.getpid()),
        )
    except BaseException:
        discard_worktree(plan)
        raise
    settle_worktree(plan)
    click.echo(
        f"Feature {run_id.hex[:8]}: branch {plan.branch} from {plan.base} "
        f"({plan.base_sha[:10]}), worktree {plan.worktree}",
        err=True,
    )
    render(
        launch(runtime, run_id, resume=False, background=background, timeout=timeout),
        runtime=runtime,
    )


# ls, show, rm and gc live in their own module (`shep feat` itself is loaded lazily).
from shep.cli.feat_views import gc, ls, rm, show  # noqa: E402

for _view in (ls, show, rm, gc):
    feat.add_command(_view)
