"""``shep inbox``, ``answer``, ``approve``, ``reject``: the questions and gates of every run.

A decision is an event on the item's own stream (the first decision wins);
then the run resumes at once in a background worker (``--wait``: in this
process, with live progress). The decision is in the log before the worker
starts, so a worker that dies before reading it still resumes with it.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import click
import msgspec

from events.display import printable
from shep.home.runtime import Runtime


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the items as a JSON list.")
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    help="Only items of runs on this repository.",
)
@click.option("--run", "run_ref", metavar="RUN", help="Only items of this run.")
@click.pass_obj
def inbox(runtime: Runtime, as_json: bool, repo: Path | None, run_ref: str | None) -> None:
    """List every pending question and approval gate across runs, oldest first.

    On a terminal with no options it is a picker that answers, approves or
    rejects in place.
    """
    from projections.inbox_queries import list_inbox, list_inbox_items
    from projections.queries import resolve_run_id

    if not runtime.has_store():
        click.echo("[]" if as_json else "The inbox is empty.")
        return
    conn = runtime.read_db()
    run_id = resolve_run_id(conn, run_ref) if run_ref else None
    repo_path = str(repo.expanduser().resolve()) if repo else None
    if as_json:
        listed = list_inbox_items(conn, repo=repo_path, run_id=run_id)
        click.echo(msgspec.json.format(msgspec.json.encode(listed), indent=2))
        return
    items = list_inbox(conn, repo=repo_path, run_id=run_id)
    if not items:
        click.echo("The inbox is empty.")
        return
    if sys.stdin.isatty() and sys.stdout.isatty() and not (repo or run_ref):
        from shep.cli.inbox_picker import pick_and_decide

        pick_and_decide(runtime, items)
        return
    now = datetime.now(UTC)
    for item in items:
        click.echo(render_item(item, now))


def render_item(item: dict[str, Any], now: datetime) -> str:
    """An item as a few lines of text: what is asked, where, since when, the choices."""
    from shep.cli.render import age

    iteration = f" #{item['iteration']}" if item["iteration"] > 1 else ""
    head = (
        f"{item['item_id'][:8]}  {item['kind']:<8}  run {item['run_id'][:8]}  "
        f"{item['workflow']}  {item['node']}{iteration}  {age(item['asked_at'], now)}"
    )
    lines = [printable(head), f"    {printable(item['prompt'])}"]
    if item["context"]:
        lines.append(f"    {printable(item['context'])}")
    for option in item["options"]:
        mark = " (recommended)" if option["recommended"] else ""
        lines.append(f"    [{printable(option['id'])}] {printable(option['label'])}{mark}")
    for artifact in item["artifacts"]:
        kind = artifact.get("kind", "file")
        lines.append(f"    {kind} {printable(artifact['path'])}  sha256 {artifact['sha256'][:12]}")
    if item["deadline"]:
        lines.append(f"    the recommended option applies at {item['deadline'][:19]} UTC")
    lines += supervisor_lines(item)
    lines.append(f"    repo {printable(item['repo'])}")
    return "\n".join(lines)


def supervisor_lines(item: dict[str, Any]) -> list[str]:
    """What the supervisor said about the item, and who voted for it (cosign policies)."""
    lines = []
    note = item.get("supervisor")
    if note:
        verdict = note["verdict"]
        if note.get("advice"):
            verdict = f"advises to {note['advice']}"
        elif note.get("answer"):
            verdict = f"{verdict} {note['answer']!r}"
        if note.get("cosign_pending"):
            verdict = "approved: your approval opens the gate"
        said = f"supervisor ({note['policy']}): {verdict}: {note['rationale']}"
        lines.append(printable(f"    {said}"))
    for voter in item.get("votes") or []:
        waiting = f"approved by {voter}: waiting for the supervisor's co-signature"
        lines.append(printable(f"    {waiting}"))
    return lines


_AS = click.option("--as", "as_", metavar="NAME", help="Decide as NAME (default: your login).")
_WAIT = click.option(
    "--wait", is_flag=True, help="Resume the run in this process, with live progress."
)


@click.command()
@click.argument("item_ref", metavar="ITEM")
@click.argument("answer_text", metavar="[ANSWER]", required=False)
@click.option("--option", "option_id", metavar="ID", help="Answer with this option.")
@click.option(
    "--text",
    "free_text",
    metavar="TEXT",
    help="Answer with this free text, even when it reads like an option's id or label.",
)
@_AS
@_WAIT
@click.pass_obj
def answer(
    runtime: Runtime,
    item_ref: str,
    answer_text: str | None,
    option_id: str | None,
    free_text: str | None,
    as_: str | None,
    wait: bool,
) -> None:
    """Answer question ITEM (or the one pending question of a run).

    ANSWER that is an option's id (as `shep inbox` shows it, `[1]`) or its label
    picks that option; any other ANSWER is free text. --option ID picks an
    option; --text TEXT is free text as typed.
    """
    from commands.answer_question import answer_question
    from events.errors import InvalidAnswerError
    from projections.inbox_queries import resolve_item
    from shep.home.identity import user_actor
    from shep.runs.decisions import check_workflow

    given = [v for v in (answer_text, option_id, free_text) if v is not None]
    if len(given) != 1:
        raise InvalidAnswerError(
            "Give the answer as ANSWER, --option ID or --text TEXT (one of them)."
        )
    item = resolve_item(_db(runtime), item_ref, kind="question")
    check_workflow(runtime, item["item_id"])
    state = answer_question(
        runtime.store(),
        UUID(item["item_id"]),
        actor=user_actor(as_),
        text=answer_text if free_text is None else free_text,
        option_id=option_id,
        as_text=free_text is not None,
    )
    decision = state.decision
    assert decision is not None
    answered = decision.answer  # type: ignore[union-attr]
    click.echo(f"Answered {item['item_id'][:8]}: {printable(answered)}")
    resume_after_decision(runtime, item["run_id"], wait=wait)


@click.command()
@click.argument("item_ref", metavar="ITEM|RUN")
@click.option("--comment", default="", help="Why, for the record.")
@_AS
@_WAIT
@click.pass_obj
def approve(runtime: Runtime, item_ref: str, comment: str, as_: str | None, wait: bool) -> None:
    """Approve gate ITEM (or the one pending gate of RUN); the run goes on."""
    from projections.inbox_queries import resolve_item
    from shep.home.identity import user_actor

    item = resolve_item(_db(runtime), item_ref, kind="approval")
    user_approves(runtime, item, actor=user_actor(as_), comment=comment, wait=wait)


def user_approves(
    runtime: Runtime, item: dict[str, Any], *, actor: str, comment: str, wait: bool
) -> None:
    """Approve ``item`` as ``actor``, say so, and resume its run once the gate is decided."""
    from shep.runs.decisions import record_approval

    approval = record_approval(runtime, item, actor=actor, comment=comment)
    click.echo(approval.line)
    if approval.decided:
        resume_after_decision(runtime, item["run_id"], wait=wait)


@click.command()
@click.argument("item_ref", metavar="ITEM|RUN")
@click.option(
    "--reason", default="", help="Why (required): the agent gets it when the phase re-runs."
)
@_AS
@_WAIT
@click.pass_obj
def reject(runtime: Runtime, item_ref: str, reason: str, as_: str | None, wait: bool) -> None:
    """Reject gate ITEM (or the one pending gate of RUN); its phase re-runs with the reason."""
    from commands.reject_item import reject_item
    from projections.catch_up import catch_up
    from projections.inbox_queries import count_rejections, resolve_item
    from shep.home.identity import user_actor
    from shep.runs.decisions import REJECTION_WARNING, check_workflow

    conn = _db(runtime)
    item = resolve_item(conn, item_ref, kind="approval")
    check_workflow(runtime, item["item_id"])
    reject_item(runtime.store(), UUID(item["item_id"]), actor=user_actor(as_), reason=reason)
    phase = item["phase"] or item["node"]
    click.echo(
        f"Rejected {item['item_id'][:8]}: {phase} of run {item['run_id'][:8]} runs again "
        "with your reason."
    )
    catch_up(conn)
    count = count_rejections(conn, item["run_id"], phase)
    if count >= REJECTION_WARNING:
        click.echo(
            f"shep: warning: {phase} of run {item['run_id'][:8]} has been rejected {count} "
            "times; consider `shep cancel` or a clearer reason.",
            err=True,
        )
    resume_after_decision(runtime, item["run_id"], wait=wait)


def _db(runtime: Runtime) -> Any:
    from events.errors import ItemRefError

    if not runtime.has_store():
        raise ItemRefError("The inbox is empty: no run has asked anything.")
    return runtime.read_db()


def resume_after_decision(runtime: Runtime, run_hex: str, *, wait: bool) -> None:
    """Resume the run now that it has a decision (``shep.runs.decisions``), and say where."""
    from shep.cli.run import render
    from shep.runs.decisions import resume_after_decision as resume_decided

    render(resume_decided(runtime, run_hex, wait=wait), quiet=True, runtime=runtime)
