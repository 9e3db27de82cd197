"""Everything the dashboard's actions take from shep's core, in one module (the reads are
in ``shep.web.core``): a decision on an inbox item, cancel, resume and fork. Each is
the core function the CLI calls, so a decision from a page means what it means from
the terminal: the same actor rules, the same refusals, the first decision wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from shep.home.runtime import Runtime
    from shep.replay.fork import Forked
    from shep.runs.cancel import Cancelled
    from shep.runs.decisions import Approval


def user_actor(as_: str | None) -> str:
    """``user:<login>`` (or the name given), refusing ``supervisor:`` and ``system:``."""
    from shep.home.identity import user_actor as actor

    return actor(as_)


def answer(
    runtime: Runtime, item_id: str, *, actor: str, text: str | None, option: str | None
) -> str:
    """Answer a question as ``actor`` (the first decision wins, as from the CLI); the answer."""
    from commands.answer_question import answer_question

    state = answer_question(
        runtime.store(),
        UUID(item_id),
        actor=actor,
        text=text,
        option_id=option,
        as_text=text is not None,
    )
    decision = state.decision
    assert decision is not None
    return str(decision.answer)  # type: ignore[union-attr]


def reject(runtime: Runtime, item_id: str, *, actor: str, reason: str) -> None:
    """Reject a gate as ``actor`` with ``reason`` (required, as from the CLI)."""
    from commands.reject_item import reject_item

    reject_item(runtime.store(), UUID(item_id), actor=actor, reason=reason)


def check_workflow(runtime: Runtime, item_id: str) -> None:
    """Refuse a decision its run could not go on with (``shep.runs.decisions``)."""
    from shep.runs.decisions import check_workflow as check

    check(runtime, item_id)


def resume_decided(runtime: Runtime) -> None:
    """Start a worker for every run whose decision nobody acted on yet (``check_inbox``)."""
    from shep.runs.inbox_watch import check_inbox

    check_inbox(runtime)


def approve(runtime: Runtime, item_id: str, *, actor: str, comment: str) -> Approval:
    """Approve gate ``item_id`` as ``actor`` (``shep approve``'s ``record_approval``): under
    a cosign policy the supervisor has not signed yet, a vote (not ``decided``)."""
    from projections.inbox_queries import resolve_item
    from shep.runs.decisions import record_approval

    item = resolve_item(runtime.read_db(), item_id, kind="approval")
    return record_approval(runtime, item, actor=actor, comment=comment)


def go_on(runtime: Runtime, run_id: str, *, decided: bool) -> str | None:
    """A detached worker for a ``decided`` run (``resume_after_decision``), else for an
    interrupted or failed one (``shep resume``, never forced): what the person is told."""
    from shep.runs.decisions import resume_after_decision
    from shep.runs.launch import resume

    if decided:
        launched = resume_after_decision(runtime, run_id, wait=False)
    else:
        launched = resume(runtime, UUID(run_id), background=True, timeout=None, force=False)
    return getattr(launched, "notice", None)


def cancel(runtime: Runtime, run_id: str) -> Cancelled:
    """Cancel the run as this server's user (``shep cancel``): stop its worker and agents."""
    from shep.home.identity import current_actor
    from shep.runs.cancel import cancel as cancel_run

    return cancel_run(runtime.store(), UUID(run_id), actor=current_actor(), grace=5.0)


def fork(
    runtime: Runtime, run_id: str, checkpoint: str, *, restore: str | None, reapply: bool
) -> tuple[Forked, str | None]:
    """Fork the run at ``checkpoint`` (``shep fork``) and start the fork in a detached
    worker: the fork, and what the person is told of the worker."""
    from shep.replay.fork import fork_run_at
    from shep.runs.launch import launch

    forked = fork_run_at(
        runtime, UUID(run_id), checkpoint, restore=restore, reapply_answers=reapply
    )
    if forked.existed:
        return forked, None
    started = launch(runtime, forked.run_id, resume=False, background=True, timeout=None)
    return forked, getattr(started, "notice", None)
