"""The actions a page may take: answer, approve, reject, cancel, resume, fork.

Every one passes the guard first (``GuardMiddleware``: the token, the ``Origin``
of this server, none at all with ``--read-only``) and then the CSRF token the
pages carry (``_checked``). A decision is recorded by the write side's own
command, as the CLI records it: ``user:<login>`` or the name given (``as``,
never ``supervisor:``/``system:``), the first decision winning; the run then
goes on as after any command (``core.resume_decided``); an approval, as after
``shep approve`` (``core.go_on``). Cancel and resume are ``shep cancel`` and
``shep resume`` (never ``--force``: a running run is refused). What the core says
while it works (``runtime.say``: a worker started, why a run does not go on here)
ends the reply's message.

Fork waits for its core function (see docs/ui.md, "Phase 2"): it is refused with
the command that does it meanwhile, rather than done by code copied out of the CLI.

A form posted without JavaScript gets a small page saying what happened; the
pages' script posts with ``X-CSRF-Token`` and gets JSON.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from events.display import printable
from events.errors import (
    AlreadyDecidedError,
    InvalidTransitionError,
    ShepError,
    WorkerStillRunningError,
)
from shep.web import core
from shep.web import decide as writes
from shep.web.app import WebState, render
from shep.web.security import CSRF_FIELD, CSRF_HEADER, check_csrf

#: Longest text an action takes (an answer, a reason): more is refused, not cut.
TEXT_LIMIT = 20_000


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _wants_json(request: Request) -> bool:
    return CSRF_HEADER in request.headers


def _reply(request: Request, status: int, message: str, back: str) -> Response:
    if _wants_json(request):
        return JSONResponse({"ok": status < 400, "message": message}, status_code=status)
    return render(request, "done.html", status=status, page="done", message=message, back=back)


async def _checked(request: Request) -> dict[str, str]:
    """The form, once its CSRF token is this server's; ``_Refused`` otherwise."""
    state: WebState = request.app.state.web
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise _Refused(415, "An action is a form (application/x-www-form-urlencoded).")
    raw = await request.body()
    if len(raw) > 4 * TEXT_LIMIT:
        raise _Refused(413, "The form is too long.")
    try:
        fields = dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        raise _Refused(400, "The form is not UTF-8.") from None
    if not check_csrf(state.guard, fields.get(CSRF_FIELD), request.headers.get(CSRF_HEADER)):
        raise _Refused(403, "This action did not come from this server's page (no CSRF token).")
    for key, value in fields.items():
        if len(value) > TEXT_LIMIT:
            raise _Refused(400, f"The {key} is too long ({len(value)} characters).")
    return fields


def _item_id(request: Request) -> str:
    item = str(request.path_params["item"])
    if len(item) != 32 or not all(c in "0123456789abcdef" for c in item):
        raise _Refused(404, f"No inbox item {item!r}.")
    return item


async def _act(request: Request, back: str, act: Any) -> Response:
    """Check the request, run ``act(fields)`` in the thread pool, say how it went."""
    from starlette.concurrency import run_in_threadpool

    try:
        fields = await _checked(request)
        message = await run_in_threadpool(act, fields)
    except _Refused as e:
        return _reply(request, e.status, str(e), back)
    except (AlreadyDecidedError, InvalidTransitionError, WorkerStillRunningError) as e:
        return _reply(request, 409, printable(e), back)  # the item's or run's state refuses it
    except ShepError as e:
        return _reply(request, 400 if e.exit_code == 2 else 500, printable(e), back)
    return _reply(request, 200, message, back)


def _decide(state: WebState, item: str, decide: Any) -> str:
    """Record a decision in a runtime of its own, then let the run go on. A decision its
    run could not go on with (its workflow changed) is refused first, recording nothing."""
    runtime = state.new_runtime()
    try:
        writes.check_workflow(runtime, item)
        message = str(decide(runtime))
        writes.resume_decided(runtime)
        return message
    finally:
        runtime.close()


def _in_runtime(state: WebState, act: Any) -> str:
    """``act(runtime)`` in a runtime of its own: the line it returns, then every notice the
    core gave meanwhile (``runtime.say``, also in the server's log), made printable."""
    runtime = state.new_runtime()
    notices: list[str] = []
    said = runtime.say

    def say(line: str) -> None:
        notices.append(line)
        said(line)

    runtime.say = say
    try:
        line = str(act(runtime))
    finally:
        runtime.close()
    return printable(" ".join([line, *notices]))


async def answer(request: Request) -> Response:
    state: WebState = request.app.state.web
    item = _item_id(request)

    def act(fields: dict[str, str]) -> str:
        actor = writes.user_actor(fields.get("as") or None)
        option = fields.get("option") or None
        text = fields.get("text", "").strip() or None
        if (option is None) == (text is None):
            raise _Refused(400, "Pick one option, or write an answer (one of them).")
        answered = _decide(
            state,
            item,
            lambda runtime: writes.answer(runtime, item, actor=actor, text=text, option=option),
        )
        return printable(f"Answered {item[:8]} as {actor}: {answered}")

    return await _act(request, f"/items/{item}", act)


async def reject(request: Request) -> Response:
    state: WebState = request.app.state.web
    item = _item_id(request)

    def act(fields: dict[str, str]) -> str:
        actor = writes.user_actor(fields.get("as") or None)
        reason = fields.get("reason", "").strip()
        _decide(
            state, item, lambda runtime: writes.reject(runtime, item, actor=actor, reason=reason)
        )
        return printable(f"Rejected {item[:8]} as {actor}: its phase runs again with the reason.")

    return await _act(request, f"/items/{item}", act)


async def approve(request: Request) -> Response:
    state: WebState = request.app.state.web
    item = _item_id(request)

    def act(fields: dict[str, str]) -> str:
        actor = writes.user_actor(fields.get("as") or None)
        comment = fields.get("comment", "").strip()

        def decide(runtime: Any) -> str:
            approval = writes.approve(runtime, item, actor=actor, comment=comment)
            if not approval.decided:
                return approval.line  # a vote: the supervisor's signature opens the gate
            notice = writes.go_on(runtime, approval.run_id, decided=True)
            return " ".join(filter(None, [approval.line, notice]))

        return _in_runtime(state, decide)

    return await _act(request, f"/items/{item}", act)


def _run_ref(request: Request) -> str:
    run = str(request.path_params["run"])
    if not run or len(run) > 32 or not all(c in "0123456789abcdef" for c in run):
        raise _Refused(404, f"No run {run!r}.")
    return run


async def _run_action(request: Request, act: Any) -> Response:
    """``act(runtime, run_id)`` on the run the path names, in a runtime of its own."""
    state: WebState = request.app.state.web
    try:
        ref = _run_ref(request)
    except _Refused as e:
        return _reply(request, e.status, str(e), "/")
    return await _act(
        request,
        f"/runs/{ref}",
        lambda fields: _in_runtime(
            state, lambda runtime: act(runtime, core.resolve_run(runtime.read_db(), ref))
        ),
    )


def _cancel(runtime: Any, run_id: str) -> str:
    cancelled = writes.cancel(runtime, run_id)
    lines = [*cancelled.stopped, f"Cancelled run {run_id[:8]}."]
    if cancelled.remote_host:
        lines.append(
            f"Its worker runs on {cancelled.remote_host}: it stops, with its agent, at its "
            "next heartbeat."
        )
    return " ".join(lines)


def _resume(runtime: Any, run_id: str) -> str:
    notice = writes.go_on(runtime, run_id, decided=False)
    return " ".join(filter(None, [f"Resumed run {run_id[:8]}.", notice]))


async def cancel(request: Request) -> Response:
    return await _run_action(request, _cancel)


async def resume(request: Request) -> Response:
    return await _run_action(request, _resume)


def _fork(fields: dict[str, str]) -> Any:
    checkpoint = fields.get("checkpoint", "").strip()
    if not checkpoint:
        raise _Refused(400, "Fork from which checkpoint? Give its id (the Replay shows each).")
    restore = fields.get("restore") or None
    if restore not in (None, "both", "state", "worktree"):
        raise _Refused(400, f"Restore {restore!r}? Use both, state or worktree.")
    reapply = fields.get("reapply") == "on"

    def act(runtime: Any, run_id: str) -> str:
        forked, notice = writes.fork(runtime, run_id, checkpoint, restore=restore, reapply=reapply)
        if forked.existed:
            return f"Fork {forked.run_id.hex[:8]} of run {run_id[:8]} already exists."
        return " ".join(filter(None, [forked.line + ".", notice]))

    return act


async def fork(request: Request) -> Response:
    state: WebState = request.app.state.web
    try:
        ref = _run_ref(request)
    except _Refused as e:
        return _reply(request, e.status, str(e), "/")
    return await _act(
        request,
        f"/runs/{ref}",
        lambda fields: _in_runtime(
            state,
            lambda runtime: _fork(fields)(runtime, core.resolve_run(runtime.read_db(), ref)),
        ),
    )


async def _item_action(request: Request, handler: Any) -> Response:
    try:
        return await handler(request)  # type: ignore[no-any-return]
    except _Refused as e:
        return _reply(request, e.status, str(e), "/inbox")


async def answer_route(request: Request) -> Response:
    return await _item_action(request, answer)


async def reject_route(request: Request) -> Response:
    return await _item_action(request, reject)


async def approve_route(request: Request) -> Response:
    return await _item_action(request, approve)


ROUTES = [
    Route("/items/{item}/answer", answer_route, methods=["POST"]),
    Route("/items/{item}/approve", approve_route, methods=["POST"]),
    Route("/items/{item}/reject", reject_route, methods=["POST"]),
    Route("/runs/{run}/cancel", cancel, methods=["POST"]),
    Route("/runs/{run}/resume", resume, methods=["POST"]),
    Route("/runs/{run}/fork", fork, methods=["POST"]),
]
