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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import click
import msgspec

from events.base import Event
from events.display import printable
from events.errors import (
    DurationError,
    FeatureError,
    FeatureNotFoundError,
    GitError,
    RemovalRefusedError,
)
from events.features import (
    BranchPushed,
    FeatureMerged,
    MergeConflicted,
    PullRequestOpened,
    TaskCompleted,
    TestsRan,
)
from events.runs import FINAL_STATUSES, NodeCompleted, NodeFailed, NodeStarted, RunStatus
from events.words import counted
from shep.cli.render import age, short_id, table
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
    waiting = feature.get("waiting") or []
    phase = feature["phase"] or "-"
    if waiting:
        phase = _phase_of(feature["workflow"], waiting[0]["node"], phase)
        return f"{phase} (waiting: {', '.join(w['node'] for w in waiting)})"
    node = feature["node"]
    if node and feature["status"] not in FINAL_STATUSES and node != phase:
        return f"{_phase_of(feature['workflow'], node, phase)} ({node})"
    return phase


def _phase_of(workflow: str, node: str, within: str) -> str:
    """The phase ``node`` counts for while the run is in phase ``within``."""
    from shep.workflows import WORKFLOWS

    found = WORKFLOWS.get(workflow)
    return found.phase(node, within) if found is not None else within


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
    events = runtime.store().load(UUID(run_id), types=_SHOW_TYPES)
    detail = describe(row, events, list_asked(conn, run_id), datetime.now(UTC))
    click.echo(_json(detail) if as_json else render(detail))


def _read_db(runtime: Runtime, ref: str) -> apsw.Connection:
    if not runtime.has_store():
        raise FeatureNotFoundError(
            f'No feature {ref!r}: none has been started yet (`shep feat new "DESCRIPTION"`).'
        )
    return runtime.read_db()


#: The events of a run's stream ``show`` reads (not its output, heartbeats, checkpoints).
_SHOW_TYPES: tuple[type[Event], ...] = (
    NodeStarted,
    NodeCompleted,
    NodeFailed,
    TaskCompleted,
    TestsRan,
    MergeConflicted,
    FeatureMerged,
    BranchPushed,
    PullRequestOpened,
)


@dataclass
class _Node:
    node: str
    phase: str
    status: str = "pending"
    starts: int = 0
    completions: int = 0
    iterations: int = 0
    agent_ms: int = 0
    waiting_ms: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    def add_usage(self, usage: Any) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if usage.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + usage.cost_usd


class _Nodes:
    """The nodes of a run, in the order they first ran, each under the phase it ran for:
    a node of no phase of its own (a repair) is listed under each phase it served.
    """

    def __init__(self, workflow: Any) -> None:
        self.workflow = workflow
        self.nodes: dict[tuple[str, str], _Node] = {}
        #: The node that runs now (a task's usage goes to it).
        self.current: _Node | None = None
        self._within: str | None = None  # the phase the run is in
        self._started_for: dict[str, str] = {}  # node -> the phase of its newest start
        self._iterations: dict[tuple[str, str], set[int]] = {}
        self._completed: dict[str, int] = {}  # node -> completions in every phase

    def get(self, name: str, phase: str | None = None) -> _Node:
        """The row of ``name`` under ``phase`` (default: the phase it last started for)."""
        workflow = self.workflow
        phase = phase or self._started_for.get(name)
        phase = phase or (workflow.phase(name) if workflow is not None else name)
        if (phase, name) not in self.nodes:
            self.nodes[(phase, name)] = _Node(name, phase)
        return self.nodes[(phase, name)]

    def started(self, event: NodeStarted) -> None:
        workflow = self.workflow
        phase = workflow.phase(event.node, self._within) if workflow is not None else event.node
        if workflow is not None and phase in workflow.node_names:
            self._within = phase
        self._started_for[event.node] = phase
        n = self.get(event.node, phase)
        n.starts += 1
        seen = self._iterations.setdefault((phase, event.node), set())
        seen.add(event.iteration)
        n.iterations = max(n.iterations, len(seen))
        n.status, self.current = "running", n

    def completed(self, event: NodeCompleted) -> str:
        """Count the completion; the label of its snapshot (``node #N`` from the 2nd on)."""
        n = self.get(event.node)
        n.completions += 1
        n.iterations = max(n.iterations, n.completions)
        n.agent_ms += event.duration_ms
        n.add_usage(event.usage)
        n.status, self.current = "completed", None
        times = self._completed[event.node] = self._completed.get(event.node, 0) + 1
        return event.node + (f" #{times}" if times > 1 else "")

    def failed(self, event: NodeFailed) -> None:
        n = self.get(event.node)
        n.agent_ms += event.duration_ms
        n.status, self.current = "failed", None


def describe(  # noqa: PLR0912 (one branch per event type)
    row: dict[str, Any], events: list[Event], asked: list[dict[str, Any]], now: datetime
) -> dict[str, Any]:
    """Everything ``show`` prints, as plain data: the feature's row, its nodes in the order
    they first ran (timed from the run's stream, waiting from its inbox items), snapshots,
    tests and the merge or pull request.
    """
    from shep.workflows import WORKFLOWS

    table = _Nodes(WORKFLOWS.get(row["workflow"]))
    snapshots: list[dict[str, str]] = []
    tests: dict[str, Any] | None = None
    merged = conflicted = pushed = pull_request = None
    for event in events:
        if isinstance(event, NodeStarted):
            table.started(event)
        elif isinstance(event, NodeCompleted):
            label = table.completed(event)
            if event.snapshot:
                snapshots.append({"at": label, "sha": event.snapshot})
        elif isinstance(event, NodeFailed):
            table.failed(event)
        elif isinstance(event, TaskCompleted):
            # A task's agent call runs inside the node that runs the tasks (implement).
            (table.current or table.get("implement")).add_usage(event.usage)
            if event.snapshot:
                snapshots.append({"at": f"task {event.task}", "sha": event.snapshot})
        elif isinstance(event, TestsRan):
            tests = {
                "command": event.command,
                "passed": event.passed,
                "exit_code": event.exit_code,
                "duration_ms": event.duration_ms,
                "output_tail": event.output_tail,
                "at": event.timestamp.isoformat(),
            }
        elif isinstance(event, FeatureMerged):
            merged = {
                "into": event.into,
                "commit": event.commit,
                "files": event.files,
                "added": event.added,
                "removed": event.removed,
                "commits": event.commits,
            }
            conflicted = None
        elif isinstance(event, MergeConflicted):
            conflicted = {"into": event.into, "files": list(event.files)}
        elif isinstance(event, BranchPushed):
            pushed = {"remote": event.remote, "branch": event.branch, "commit": event.commit}
        elif isinstance(event, PullRequestOpened):
            pull_request = {"url": event.url, "number": event.number}
    _add_waiting_time(table.get, asked, row, now)
    if row["status"] in FINAL_STATUSES or row["status"] == RunStatus.INTERRUPTED:
        for n in table.nodes.values():
            if n.status == "running":
                n.status = "stopped"
    listed = [vars(n) for n in table.nodes.values()]
    return {
        "id": short_id(row["run_id"]),
        **{k: v for k, v in row.items() if k not in ("tasks", "waiting")},
        "worktree_exists": os.path.isdir(row["worktree"]),
        "nodes": listed,
        "totals": {
            key: sum(n[key] for n in listed)
            for key in ("agent_ms", "waiting_ms", "input_tokens", "output_tokens")
        }
        | {"cost_usd": _sum_cost(listed)},
        "waiting": row["waiting"],
        "snapshots": snapshots,
        "tasks": row["tasks"],
        "tests": tests,
        "merge": {
            "merged": merged,
            "conflicted": conflicted,
            "pushed": pushed,
            "pull_request": pull_request,
        },
    }


def _add_waiting_time(
    node: Callable[[str], _Node], asked: list[dict[str, Any]], row: dict[str, Any], now: datetime
) -> None:
    """Each item waited from being asked to its decision (to now while pending, to the run's
    end when it was withdrawn): that time goes to the node that asked.
    """
    for item in asked:
        n = node(item["node"])
        end = item["answered_at"]
        if item["status"] == "pending":
            n.status = "waiting"
            end = now.isoformat()
        elif end is None:
            end = row["finished_at"] or now.isoformat()
        waited = datetime.fromisoformat(end) - datetime.fromisoformat(item["asked_at"])
        n.waiting_ms += max(0, int(waited.total_seconds() * 1000))
        if n.status == "pending" and item["status"] != "pending":
            n.status = "completed" if item["status"] != "withdrawn" else "withdrawn"


def _sum_cost(nodes: list[dict[str, Any]]) -> float | None:
    costs = [n["cost_usd"] for n in nodes if n["cost_usd"] is not None]
    return sum(costs) if costs else None


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
    freed = removed = failed = 0
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
            continue
        except (FeatureError, GitError) as e:
            click.echo(printable(f"kept     {sid}  {row['worktree']}: {e}"))
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
    removed, freed = _leftovers(runtime, features, dry_run, removed, freed)
    _report_vanished(features, handled)
    _report_orphans(worktrees_root(runtime.home), features)
    verb = "Would free" if dry_run else "Freed"
    if removed:
        click.echo(f"{verb} {human_size(freed)} from {counted(removed, 'worktree')}.")
    else:
        click.echo(f"Nothing to remove: no finished feature's worktree is older than {older_than}.")
    if failed:
        raise FeatureError(f"{failed} worktree(s) could not be removed; see above.")


def _leftovers(
    runtime: Runtime, features: list[dict[str, Any]], dry_run: bool, count: int, freed: int
) -> tuple[int, int]:
    """Remove (or list) the leftovers of runs never created; ``count`` and ``freed`` (the
    worktrees and bytes so far) with theirs added.
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
                continue
            click.echo(printable(f"removed  leftover {what}"))
            for line in done:
                click.echo(f"         {printable(line)}")
        count, freed = count + 1, freed + size
    return count, freed


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
