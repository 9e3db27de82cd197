"""``shep feat ls``, ``show``, ``rm`` and ``gc``: features as the log tells them, and their cleanup.

``ls`` and ``show`` read the features projection (``show`` also the run's own
stream, for per-node timings and snapshots). ``rm`` and ``gc`` remove worktrees
as ``shep.features.removal`` decides, on the run's stream, never on the
projection. Anything they will not do without ``--force`` is refused in one
line before anything changes.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import click
import msgspec

from events.display import printable, short_id
from events.errors import (
    DurationError,
    FeatureError,
    FeatureNotFoundError,
    GitError,
    RemovalRefusedError,
)
from events.runs import FINAL_STATUSES
from events.words import counted
from shep.cli.render import age, table
from shep.features.removal import Feature, carry_out, disk_usage, load_feature, plan_removal
from shep.home.runtime import Runtime

if TYPE_CHECKING:
    import apsw

    from events.store import EventStore

#: Seconds between SIGTERM and SIGKILL when ``rm --force`` stops a feature's worker.
STOP_GRACE = 5.0
_DESCRIPTION_WIDTH = 48


# -- ls ---------------------------------------------------------------------------------------


@click.command("ls")
@click.option(
    "--all", "show_all", is_flag=True, help="Finished features too (completed, failed, cancelled)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the features as a JSON list.")
@click.pass_obj
def ls(runtime: Runtime, show_all: bool, as_json: bool) -> None:
    """List features in progress (every one with --all), newest first.

    Each with its id, status, phase (and the node that runs or waits), tasks
    done of those begun, branch, description and age.
    """
    from projections.feature_queries import list_features

    features = (
        list_features(runtime.read_db(), include_finished=show_all) if runtime.has_store() else []
    )
    if as_json:
        click.echo(_json([_public(f) for f in features]))  # `[]` when there are none
        return
    if not features:
        click.echo(
            'No features yet: start one with `shep feat new "DESCRIPTION"`.'
            if show_all
            else "No features in progress (`shep feat ls --all` shows finished ones too)."
        )
        return
    now = datetime.now(UTC)
    click.echo(
        table(
            ["ID", "STATUS", "PHASE", "TASKS", "BRANCH", "DESCRIPTION", "AGE"],
            [
                [
                    short_id(f["run_id"]),
                    f["status"],
                    printable(_phase(f)),
                    f"{f['tasks_done']}/{f['tasks_total']}" if f["tasks_total"] else "-",
                    printable(f["branch"] or "-"),
                    _truncate(
                        printable(f["description"].splitlines()[0] if f["description"] else "")
                    ),
                    age(f["created_at"], now),
                ]
                for f in features
            ],
        )
    )


def _phase(feature: dict[str, Any]) -> str:
    """The phase, and the node within it that runs or waits (``plan (waiting: plan_gate)``)."""
    from shep.features.timeline import phase_of

    waiting = feature.get("waiting") or []
    phase = feature["phase"] or "-"
    if waiting:
        phase = phase_of(feature["workflow"], waiting[0]["node"], phase)
        return f"{phase} (waiting: {', '.join(w['node'] for w in waiting)})"
    node = feature["node"]
    if node and feature["status"] not in FINAL_STATUSES and node != phase:
        return f"{phase_of(feature['workflow'], node, phase)} ({node})"
    return phase


def _truncate(text: str, width: int = _DESCRIPTION_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def _public(feature: dict[str, Any]) -> dict[str, Any]:
    return {"id": short_id(feature["run_id"]), **feature}


def _json(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value).decode(), indent=2)


# -- show -------------------------------------------------------------------------------------


@click.command("show")
@click.argument("feature")
@click.option("--json", "as_json", is_flag=True, help="Print the feature as a JSON object.")
@click.pass_obj
def show(runtime: Runtime, feature: str, as_json: bool) -> None:
    """Show a feature: phases, timings, waiting, tasks, snapshots, tests, merge.

    FEATURE is a run id (or a unique prefix of one), the feature's branch, or
    its spec directory's name. Each node of each phase: status, iterations,
    agent time and time waiting for a person (from asking to the decision),
    tokens and cost; then what it waits for, branch, base, worktree,
    snapshots, tasks, tests, and the merge or pull request.
    """
    from projections.feature_queries import get_feature, list_asked, resolve_feature_id

    conn = _read_db(runtime, feature)
    run_id = resolve_feature_id(conn, feature)
    row = get_feature(conn, run_id)
    from shep.features.timeline import SHOW_TYPES, describe

    events = runtime.store().load(UUID(run_id), types=SHOW_TYPES)
    detail = describe(row, events, list_asked(conn, run_id), datetime.now(UTC))
    click.echo(_json(detail) if as_json else render(detail))


def _read_db(runtime: Runtime, ref: str) -> apsw.Connection:
    if not runtime.has_store():
        raise FeatureNotFoundError(
            f'No feature {ref!r}: none has been started yet (`shep feat new "DESCRIPTION"`).'
        )
    return runtime.read_db()


def render(d: dict[str, Any]) -> str:
    """``describe``'s data as text: a header, the nodes' table, then the details."""
    now = datetime.now(UTC)
    p = printable
    status = d["status"] + (f": {d['error']}" if d["error"] else "")
    lines = [
        f"feature   {d['run_id']}  ({d['workflow']})",
        f"          {p(d['description'])}",
        f"status    {p(status)}",
        f"phase     {p(_phase(d))}",
        f"branch    {p(d['branch'] or '-')}  from {p(d['base'] or '-')}"
        + (f" at {d['base_sha'][:10]}" if d["base_sha"] else ""),
        f"repo      {p(d['source_repo'] or '-')}",
        f"worktree  {p(d['worktree'])}  ({_worktree_state(d, now)})",
        f"spec      {p(d['spec_dir'] or '-')}",
        f"created   {d['created_at']} ({age(d['created_at'], now)} ago) by {p(d['created_by'])}",
    ]
    lines += [
        f"waiting   {w['kind']} {w['item_id'][:8]} at {p(w['node'])} for "
        f"{age(w['asked_at'], now)}: {p(w['prompt'])} (shep inbox)"
        for w in d["waiting"]
    ]
    totals = d["totals"]
    lines.append(
        f"time      agent {_duration(totals['agent_ms'])}, "
        f"waiting for people {_duration(totals['waiting_ms'])}"
    )
    lines.append(
        f"usage     {totals['input_tokens']} in / {totals['output_tokens']} out tokens, "
        f"{_cost(totals['cost_usd'])}"
    )
    lines.append(f"tests     {_tests_line(d['tests'])}")
    lines.append(f"result    {_result_line(d)}")
    if d["nodes"]:
        lines += [
            "",
            table(
                ["PHASE", "NODE", "STATUS", "ITER", "AGENT", "WAITING", "TOKENS", "COST"],
                [
                    [
                        p(n["phase"]),
                        p(n["node"]),
                        n["status"],
                        str(n["iterations"] or "-"),
                        _duration(n["agent_ms"]),
                        _duration(n["waiting_ms"]) if n["waiting_ms"] else "-",
                        f"{n['input_tokens']}/{n['output_tokens']}",
                        _cost(n["cost_usd"]),
                    ]
                    for n in d["nodes"]
                ],
            ),
        ]
    if d["tasks"]:
        lines += [
            "",
            table(
                ["TASK", "PHASE", "STATE", "TRIES", "TITLE", "SNAPSHOT"],
                [
                    [
                        p(t["task"]),
                        p(t["phase"]),
                        t["state"],
                        str(t["attempts"]),
                        _truncate(p(t["title"]), 40),
                        (t["snapshot"] or "-")[:10],
                    ]
                    for t in d["tasks"]
                ],
            ),
        ]
    if d["snapshots"]:
        lines += [
            "",
            table(["SNAPSHOT OF", "COMMIT"], [[p(s["at"]), s["sha"]] for s in d["snapshots"]]),
        ]
    tests = d["tests"]
    if tests and not tests["passed"] and tests["output_tail"].strip():
        lines += ["", "test output (last lines)"]
        lines += [f"  {p(x)}" for x in tests["output_tail"].rstrip().splitlines()[-8:]]
    return "\n".join(lines)


def _worktree_state(d: dict[str, Any], now: datetime) -> str:
    if d["worktree_removed_at"]:
        branch = "branch deleted" if d["branch_deleted"] else "branch kept"
        return (
            f"removed {age(d['worktree_removed_at'], now)} ago by {printable(d['removed_by'])}: "
            f"{printable(d['removal_reason'])}; {branch}"
        )
    if d["worktree_exists"]:
        return "present"
    return f"MISSING: gone, but shep did not remove it; `shep feat rm {d['id']}` records it"


def _tests_line(tests: dict[str, Any] | None) -> str:
    if tests is None:
        return "not run"
    if tests["exit_code"] is None:
        outcome = "timed out"
    else:
        outcome = "passed" if tests["passed"] else f"FAILED (exit {tests['exit_code']})"
    return f"`{printable(tests['command'])}` {outcome} in {_duration(tests['duration_ms'])}"


def _result_line(d: dict[str, Any]) -> str:
    merge = d["merge"]
    parts = []
    if merge["merged"]:
        m = merge["merged"]
        parts.append(
            f"merged into {printable(m['into'])} as {m['commit'][:10]} "
            f"({counted(m['files'], 'file')}, "
            f"+{m['added']} -{m['removed']}, {counted(m['commits'], 'commit')})"
        )
    if merge["conflicted"]:
        c = merge["conflicted"]
        parts.append(
            f"merging into {printable(c['into'])} conflicted in {printable(', '.join(c['files']))}"
        )
    if merge["pushed"]:
        parts.append(f"pushed to {printable(merge['pushed']['remote'])}")
    if merge["pull_request"]:
        parts.append(f"pull request {printable(merge['pull_request']['url'])}")
    return "; ".join(parts) if parts else "not merged"


def _duration(ms: int) -> str:
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def _cost(cost: float | None) -> str:
    return f"${cost:.4f}" if cost is not None else "-"


# -- rm and gc: the removal is decided and carried out in shep.features.removal ----------------


def _cancel(store: EventStore, feature: Feature) -> list[str]:
    """Cancel the feature's run and stop its worker, as `shep cancel` does."""
    from events.errors import InvalidTransitionError
    from shep.home.identity import current_actor
    from shep.runs.cancel import cancel

    try:
        cancelled = cancel(
            store,
            feature.run_id,
            actor=current_actor(),
            grace=STOP_GRACE,
            reason="shep feat rm --force",
        )
    except InvalidTransitionError:
        return []  # it ended meanwhile
    return [*cancelled.stopped, f"Cancelled run {feature.short}."]


@click.command("rm")
@click.argument("feature")
@click.option(
    "--force",
    is_flag=True,
    help="Cancel the run if it is not finished, remove uncommitted work with the worktree, "
    "remove a worktree on a branch shep did not create, and delete an unmerged branch.",
)
@click.pass_obj
def rm(runtime: Runtime, feature: str, force: bool) -> None:
    """Remove FEATURE's worktree, and its branch once merged (with --force, always).

    Refused, with nothing changed, while the run is not finished, when the
    worktree has uncommitted changes, or when its branch is not the one shep
    created; --force does it anyway (a branch shep did not create is never
    deleted). The removal is recorded in the log.
    """
    from projections.feature_queries import resolve_feature_id

    run_id = UUID(resolve_feature_id(_read_db(runtime, feature), feature))
    store = runtime.store()
    found = load_feature(store, run_id)
    removal = plan_removal(found, force=force)
    if found.state.status not in FINAL_STATUSES:
        for line in _cancel(store, found):
            click.echo(line)
    reason = "shep feat rm --force" if force else "shep feat rm"
    for line in carry_out(store, removal, force=force, reason=reason):
        click.echo(printable(line))


_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds in ``72h``, ``3d``, ``90m``, ``2w``, ``30s`` or ``3600`` (plain seconds)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise DurationError(
            f"--older-than takes a duration such as 72h, 3d, 90m or 3600 (seconds), not {text!r}."
        )
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


@click.command("gc")
@click.option(
    "--older-than",
    default="72h",
    show_default=True,
    metavar="AGE",
    help="Remove worktrees of features finished at least this long ago (72h, 3d, 90m, 3600).",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.pass_obj
def gc(runtime: Runtime, older_than: str, dry_run: bool) -> None:
    """Remove the worktrees of finished features older than --older-than.

    Finished: completed, failed or cancelled, that long ago. Each is listed
    with the disk space it held; its branch goes too once merged. A worktree
    that `shep feat rm` would refuse (uncommitted changes, a branch shep did
    not create) is kept and said why. A branch and worktree made for a run
    that was never created (`shep feat new` or `shep fork` killed in between)
    are removed whatever their age. Also reported, never touched:
    directories under $SHEP_HOME/worktrees no feature uses, and worktrees that
    vanished without shep removing them.
    """
    from projections.feature_queries import list_features
    from shep.features.start import worktrees_root

    threshold = parse_duration(older_than)
    now = datetime.now(UTC)
    features = (
        list_features(runtime.read_db(), include_finished=True) if runtime.has_store() else []
    )
    freed = removed = failed = kept = 0
    handled: set[str] = set()
    for row in features:
        if row["status"] not in FINAL_STATUSES or row["worktree_removed_at"]:
            continue
        ended = row["finished_at"] or row["updated_at"]
        if (now - datetime.fromisoformat(ended)).total_seconds() < threshold:
            continue
        handled.add(row["run_id"])
        sid = short_id(row["run_id"])
        store = runtime.store()
        try:
            removal = plan_removal(load_feature(store, UUID(row["run_id"])), force=False)
        except RemovalRefusedError as e:
            click.echo(
                printable(
                    f"kept     {sid}  {row['worktree']}: {e.problem} "
                    f"(`shep feat rm {sid} --force` removes it anyway)"
                )
            )
            kept += 1
            continue
        except (FeatureError, GitError) as e:
            click.echo(printable(f"kept     {sid}  {row['worktree']}: {e}"))
            kept += 1
            continue
        size = disk_usage(row["worktree"]) if removal.exists else 0
        what = (
            f"{sid}  {row['worktree']}  {human_size(size)}  ({row['status']} {age(ended, now)} ago)"
        )
        if dry_run:
            click.echo(printable(f"would remove {what}"))
            freed, removed = freed + size, removed + 1
            continue
        try:
            done = carry_out(
                store,
                removal,
                force=False,
                reason=f"shep feat gc: {row['status']} {age(ended, now)} ago",
            )
        except (FeatureError, GitError) as e:
            click.echo(printable(f"failed   {sid}  {row['worktree']}: {e}"))
            failed += 1
            continue
        click.echo(printable(f"removed  {what}"))
        for line in done[1:]:
            click.echo(f"         {printable(line)}")
        freed, removed = freed + size, removed + 1
    removed, freed, kept = _leftovers(runtime, features, dry_run, removed, freed, kept)
    _report_vanished(features, handled)
    _report_orphans(worktrees_root(runtime.home), features)
    click.echo(_gc_summary(dry_run, removed, freed, kept + failed, older_than))
    if failed:
        raise FeatureError(f"{failed} worktree(s) could not be removed; see above.")


def _gc_summary(dry_run: bool, removed: int, freed: int, kept: int, older_than: str) -> str:
    """gc's last line: what it freed, or why nothing (``kept``: listed above, still there)."""
    if removed:
        verb = "Would free" if dry_run else "Freed"
        return f"{verb} {human_size(freed)} from {counted(removed, 'worktree')}."
    if kept:
        # Some were old enough and are still there: say so, not that there were none.
        what = "Nothing would be removed" if dry_run else "Nothing removed"
        return f"{what}: {counted(kept, 'worktree')} kept (see above)."
    return f"Nothing to remove: no finished feature's worktree is older than {older_than}."


def _leftovers(
    runtime: Runtime,
    features: list[dict[str, Any]],
    dry_run: bool,
    count: int,
    freed: int,
    kept: int,
) -> tuple[int, int, int]:
    """Remove (or list) the leftovers of runs never created; ``count``, ``freed`` and
    ``kept`` (the worktrees removed, bytes freed and worktrees kept so far) with theirs added.
    """
    from shep.features.removal import leftovers, remove_leftover

    known = {os.path.realpath(f["worktree"]) for f in features}
    for leftover in leftovers(runtime.home, known):
        size = disk_usage(leftover.worktree)
        what = (
            f"{leftover.branch}  {leftover.worktree}  {human_size(size)}  (made for a run "
            "that was never created: `shep feat new` or `shep fork` was stopped)"
        )
        if dry_run:
            click.echo(printable(f"would remove leftover {what}"))
        else:
            try:
                done = remove_leftover(leftover)
            except GitError as e:
                click.echo(printable(f"kept     leftover {leftover.worktree}: {e}"))
                kept += 1
                continue
            click.echo(printable(f"removed  leftover {what}"))
            for line in done:
                click.echo(f"         {printable(line)}")
        count, freed = count + 1, freed + size
    return count, freed, kept


def _report_vanished(features: list[dict[str, Any]], handled: set[str]) -> None:
    for row in features:
        if row["run_id"] in handled or row["worktree_removed_at"]:
            continue
        if not os.path.lexists(row["worktree"]):
            sid = short_id(row["run_id"])
            click.echo(
                printable(
                    f"missing  {sid}  {row['worktree']} ({row['status']}): gone, but shep did not "
                    f"remove it; `shep feat rm {sid}` records it."
                )
            )


def _report_orphans(root: Path, features: list[dict[str, Any]]) -> None:
    """Directories under ``root/<repo key>/`` that no feature's worktree is (a leftover's
    note, and a leftover being made, are not: see ``_leftovers``)."""
    from shep.features.start import MAKING_SUFFIX, making_note

    if not root.is_dir():
        return
    # A removed feature's directory that is still (or again) there is reported too.
    known = {os.path.realpath(f["worktree"]) for f in features if not f["worktree_removed_at"]}
    for key in sorted(root.iterdir()):
        entries = sorted(key.iterdir()) if key.is_dir() and not key.is_symlink() else [key]
        for entry in entries:
            if os.path.realpath(entry) in known or entry.name.endswith(MAKING_SUFFIX):
                continue
            if making_note(entry).exists():
                continue
            click.echo(
                printable(
                    f"orphan   {entry}  {human_size(disk_usage(entry))}: no feature uses it; "
                    "remove it with `git worktree remove` in its repository, or delete it."
                )
            )


def human_size(size: int) -> str:
    """``0 B``, ``512 B``, ``4.0 KiB``, ``12.3 MiB``, ``1.2 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
