"""What happens when a person decides an inbox item: the approval (or a cosign vote) is
recorded, and the run goes on, here or on the host where it runs.

Every face decides through these (``shep approve``, the inbox picker, the dashboard),
so an approval means the same whoever records it and wherever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

if TYPE_CHECKING:
    from shep.home.runtime import Runtime
    from shep.runs.launch import Background, Outcome


#: Rejections of one phase after which the person is told how many there were.
REJECTION_WARNING = 5


@dataclass(frozen=True)
class Approval:
    """A person's approval of a gate, as recorded."""

    item_id: str
    node: str
    run_id: str
    #: The gate is decided (the run may go on). False: a vote under a cosign policy.
    decided: bool
    #: The cosign policy the vote was cast under (the supervisor signs too), if any.
    cosign: str | None
    #: Who else signed a decided cosigned gate.
    cosigned_by: str | None

    @property
    def line(self) -> str:
        """What the person is told."""
        short, where = self.item_id[:8], f"{self.node} of run {self.run_id[:8]}"
        if not self.decided:
            return (
                f"Approved {short} ({where}) as one of two signatures: under policy "
                f"{self.cosign} the supervisor signs too; the gate opens once it approves."
            )
        end = f", co-signed by {self.cosigned_by}." if self.cosigned_by else "."
        return f"Approved {short} ({where}){end}"


def check_workflow(runtime: Runtime, item_id: str) -> None:
    """Refuse (``WorkflowChangedError``) a decision on ``item_id`` its run could not go on
    with: its workflow changed since it started and declares no migration
    (``shep.runs.pin``). Called before a decision is recorded, so nothing is."""
    from shep.runs.pin import check_decision

    check_decision(runtime.store(), UUID(item_id), runtime.home)


def record_approval(
    runtime: Runtime, item: dict[str, Any], *, actor: str, comment: str
) -> Approval:
    """Record ``actor``'s approval of gate ``item`` (an inbox row).

    Under a cosign policy whose supervisor has not signed yet, the approval is a
    vote: the gate stays open and the supervisor is started to sign (or not).
    """
    from commands.approve_item import approve_item
    from shep.home.procs import spawn_shep
    from shep.supervisor.start import cosign_label, log_path

    check_workflow(runtime, item["item_id"])
    store = runtime.store()
    item_id = UUID(item["item_id"])
    cosign = cosign_label(store, item_id)
    state = approve_item(store, item_id, actor=actor, comment=comment, cosign=cosign)
    if state.decision is None:
        spawn_shep(runtime.home, ["supervisor", "run", "--background"], log_path(runtime.home))
    return Approval(
        item_id=item["item_id"],
        node=item["node"],
        run_id=item["run_id"],
        decided=state.decision is not None,
        cosign=cosign,
        cosigned_by=getattr(state.decision, "cosigned_by", None),
    )


def resume_after_decision(
    runtime: Runtime, run_hex: str, *, wait: bool
) -> Background | Outcome | None:
    """Resume the run now that it has a decision, unless a worker already runs it (or it
    runs on another host, or is interrupted: ``runtime.say`` tells which). ``wait``: in
    this process, until it ends or waits again; else in a detached worker.
    """
    from commands.run_state import load_run
    from events.errors import InvalidTransitionError
    from events.runs import WAITING_STATUSES, RunStatus
    from shep.runs.launch import launch

    run_id = UUID(run_hex)
    state = load_run(runtime.store(), run_id)
    if state.status is RunStatus.INTERRUPTED:
        short = run_hex[:8]
        runtime.say(
            f"Run {short} is interrupted; it goes on with this decision once you "
            f"`shep resume {short}`."
        )
        return None
    if state.status not in WAITING_STATUSES:
        # Running: its worker takes the decision before it waits again. Ended: nothing
        # to resume.
        return None
    if runtime.shared and state.host:
        from shep.home.identity import host_name

        if state.host != host_name():
            runtime.say(
                f"Run {run_hex[:8]} goes on on {state.host}, where it runs: it resumes "
                "there with this decision."
            )
            return None
    try:
        return launch(runtime, run_id, resume=True, background=not wait, timeout=None)
    except InvalidTransitionError:
        return None  # another decision's worker got there first; it reads this one too
