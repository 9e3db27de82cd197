"""``shep _keep``: the keeper of a home's copy of the shared log (``projections.keeper``)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import click

from projections.keeper import HEARTBEAT, LINGER
from shep.home.runtime import Runtime


@click.command("_keep", hidden=True)
@click.option("--linger", type=float, default=LINGER, help="Seconds to stay after the last read.")
@click.option("--heartbeat", type=float, default=HEARTBEAT, help="Seconds between checks.")
@click.pass_obj
def keep(runtime: Runtime, linger: float, heartbeat: float) -> None:
    """Keep this home's copy of the shared log current until nobody reads it for a while.

    Started detached by the first read on a shared home that finds no keeper; leaves at
    once when another keeper runs, or when the home is not on a shared store.
    """
    from projections.keeper import keep as keep_copy

    def say(message: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        click.echo(f"{now} shep: keeper {os.getpid()}: {message}", err=True)

    if runtime.store_url is None:
        say("this home is not on a shared store: nothing to keep.")
        return
    os.makedirs(runtime.home_dir, mode=0o700, exist_ok=True)
    say("keeping this machine's copy of the shared log current.")
    if keep_copy(
        runtime.db_file, runtime.store_url, linger=linger, heartbeat=heartbeat, on_notice=say
    ):
        say("no read for a while (or the home is gone): stopped.")
    else:
        say("another keeper runs: stopped.")
