"""``shep doctor`` and ``shep --version``: what a support thread asks first, one line each."""

from __future__ import annotations

import sys
from dataclasses import asdict

import click

from events.display import printable
from events.errors import ShepError
from shep.home.doctor import Check
from shep.home.runtime import Runtime
from shep.home.versions import StoreVersions, WrittenVersions, get_store_versions

_MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as a JSON list.")
@click.option(
    "--agent-timeout",
    type=click.FloatRange(min=0.1, max=600),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="How long the agent CLI's --version may take.",
)
@click.pass_obj
def doctor(runtime: Runtime, as_json: bool, agent_timeout: float) -> None:
    """Check this home, its store, the agent CLI, git and the shared store, one line each.

    Changes nothing: the home is not created, the store is read, not migrated.
    Exits 1 when something needs action; each such line says what to do.
    Lines marked warn are worth knowing and need nothing now.
    """
    from shep.agents.health import check_agent
    from shep.git.health import check_git
    from shep.home.doctor import (
        check_disk,
        check_home,
        check_keeper,
        check_locks,
        check_shared_store,
        check_store,
        check_versions,
        configured_agent,
    )

    versions, store = check_versions(runtime)
    checks: list[Check] = [
        versions,
        check_home(runtime),
        *check_store(runtime, store),
        check_locks(runtime),
        check_disk(runtime),
        check_agent(configured_agent(runtime, store), runtime.home, timeout=agent_timeout),
        check_git(),
        check_shared_store(runtime, store),
        *check_keeper(runtime),
    ]
    if as_json:
        import msgspec

        click.echo(msgspec.json.format(msgspec.json.encode([asdict(c) for c in checks]).decode()))
    else:
        for check in checks:
            line = check.detail + (f". {check.action}" if check.action else "")
            if check.name == "versions":
                line = "; ".join(version_lines(runtime, store)[1:])
                line = f"shep {WrittenVersions().shep} {line}"
            click.echo(printable(f"{_MARK[check.status]}  {check.name}: {line}"))
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        click.echo(f"shep: needs action: {', '.join(dict.fromkeys(failed))} (see above)", err=True)
        sys.exit(1)


def print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``shep --version``: shep's version, the versions it writes, and the store's."""
    if not value or ctx.resilient_parsing:
        return
    try:
        runtime: Runtime | None = Runtime.from_environment(repairing=True)
    except ShepError as e:
        runtime = None
        error = e
    if runtime is None:
        lines = version_lines(None, None)
        lines.append(printable(f"store: cannot tell: {error}"))
    else:
        store = get_store_versions(runtime.db_file, runtime.store_url)
        lines = version_lines(runtime, store)
    for line in lines:
        click.echo(line)
    ctx.exit(0)


def version_lines(runtime: Runtime | None, store: StoreVersions | None) -> list[str]:
    """``shep, version X``, then what it writes, then what the store holds (if known)."""
    written = WrittenVersions()
    lines = [
        f"shep, version {written.shep}",
        f"writes: store schema {written.store_schema}, "
        f"checkpoint state {written.checkpoint_state}, "
        f"settings ({_pairs(written.settings)}), projections ({_pairs(written.projections)})",
    ]
    if runtime is not None and runtime.store_file_error is not None:
        lines.append(printable(f"store: cannot tell: {runtime.store_file_error}"))
    elif store is not None:
        lines.append(printable(f"store: {_store_line(store, written)}"))
    return lines


def _store_line(store: StoreVersions, written: WrittenVersions) -> str:
    kind = "shared store " if store.shared else ""
    if store.error is not None:
        return f"{kind}{store.location}: cannot be read: {store.error}"
    if not store.exists:
        return f"no store yet ({kind}{store.location})"
    text = f"{kind}{store.location}: {store.schema_said}"
    if store.written_by:
        text += f", written by shep {store.written_by}"
    if store.newest_writer and store.newest_writer != store.written_by:
        text += f", newest writer shep {store.newest_writer}"
    other = {n: v for n, v in store.projections.items() if written.projections.get(n) != v}
    if other:
        text += f"; projections of other versions: {_pairs(other)} (rebuilt on next use)"
    return text


def _pairs(numbers: dict[str, int]) -> str:
    return ", ".join(f"{name} {number}" for name, number in numbers.items())
