"""``shep supervisor``: policies that let the supervisor answer questions and approve gates.

Everything here needs the ``collaboration`` feature flag (off by default):
``shep settings flags enable collaboration``. Policies and decisions are
events; ``why`` and ``what-if`` only read.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import click
import msgspec

from events.display import printable
from events.errors import PolicyError, SupervisorOffError
from events.supervisor import AUTONOMY_LEVELS, EVALUATOR_TIMEOUT, ITEM_KINDS
from events.words import counted
from shep.home.runtime import Runtime
from shep.supervisor.policy_file import read_policy_file

if TYPE_CHECKING:
    from commands.policies import Policy
    from events.supervisor import Guardrails


@click.group()
def supervisor() -> None:
    """Let a supervisor decide the inbox items a policy covers, with every decision as evidence."""


_SCOPE = click.option(
    "--scope",
    default="global",
    show_default=True,
    metavar="SCOPE",
    help="global, repo (this repository), repo:PATH, or run:RUN (one run).",
)


def _scope(runtime: Runtime, text: str) -> str:
    """``global``, ``repo:<absolute path of the repository's root>`` or ``run:<full run id>``."""
    kind, _, value = text.partition(":")
    if text == "global":
        return text
    if kind == "repo":
        from events.errors import GitError
        from shep.git import repo_root

        try:
            return f"repo:{repo_root(Path(value or '.').expanduser().resolve())}"
        except GitError as e:
            raise PolicyError(f"--scope {text}: {e}") from None
    if kind == "run" and value:
        from projections.queries import resolve_run_id

        if not runtime.has_store():
            raise PolicyError(f"--scope {text}: there are no runs yet.")
        return f"run:{resolve_run_id(runtime.read_db(), value)}"
    raise PolicyError(f"Unknown scope {text!r}; use global, repo, repo:PATH or run:RUN.")


class AutonomyChoice(click.Choice[str]):
    """An autonomy level; an unknown one is a one-line ``PolicyError`` naming the known ones."""

    def __init__(self) -> None:
        super().__init__(AUTONOMY_LEVELS)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            raise PolicyError(
                f"Unknown autonomy {value!r}; use one of {', '.join(AUTONOMY_LEVELS)}."
            ) from None


@supervisor.command("configure")
@_SCOPE
@click.option("--autonomy", type=AutonomyChoice(), help="What it may do.")
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KIND=AUTONOMY",
    help=f"Another autonomy for one kind of item ({', '.join(ITEM_KINDS)}); repeatable.",
)
@click.option("--max-diff-lines", type=click.IntRange(0), help="Guardrail: most lines changed.")
@click.option("--max-files-changed", type=click.IntRange(0), help="Guardrail: most files.")
@click.option(
    "--block",
    "blocked",
    multiple=True,
    metavar="PATTERN",
    help="Guardrail: no changed path may match PATTERN (fnmatch); repeatable.",
)
@click.option("--tests-must-pass", is_flag=True, help="Guardrail: the last test run passed.")
@click.option(
    "--auto-approve", is_flag=True, help="Approve without the evaluator when every rule passes."
)
@click.option("--model", help="The evaluator's model (default: the agent's).")
@click.option(
    "--timeout",
    type=click.FloatRange(1, 86400),
    default=EVALUATOR_TIMEOUT,
    show_default=True,
    help="Seconds the evaluator may take; then the item is escalated.",
)
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read the policy from a YAML or JSON file instead of the options.",
)
@click.pass_obj
def configure(
    runtime: Runtime,
    scope: str,
    autonomy: str | None,
    overrides: tuple[str, ...],
    max_diff_lines: int | None,
    max_files_changed: int | None,
    blocked: tuple[str, ...],
    tests_must_pass: bool,
    auto_approve: bool,
    model: str | None,
    timeout: float,
    policy_file: Path | None,
) -> None:
    """Set the policy of a SCOPE (the most specific enabled one covers an item)."""
    from commands.policies import configure_policy
    from events.supervisor import Guardrails
    from shep.home.identity import current_actor

    if policy_file is not None:
        read = read_policy_file(policy_file)
        autonomy, model, timeout = read.autonomy, read.model, read.timeout
        override_map = dict(read.overrides)
        rules = msgspec.convert(read.guardrails, Guardrails)
    else:
        if autonomy is None:
            raise PolicyError("Give --autonomy (advisory, cosign or autonomous) or --policy FILE.")
        override_map = {}
        for text in overrides:
            kind, sep, level = text.partition("=")
            if not sep:
                raise PolicyError(f"--override {text!r}: write KIND=AUTONOMY, e.g. merge=cosign.")
            override_map[kind.strip()] = level.strip()
        rules = Guardrails(
            max_diff_lines=max_diff_lines,
            max_files_changed=max_files_changed,
            blocked_paths=list(blocked),
            tests_must_pass=tests_must_pass,
            auto_approve=auto_approve,
        )
    # The scope first: a run that does not exist must not create the store.
    where = _scope(runtime, scope)
    policy = configure_policy(
        runtime.store(),
        where,
        autonomy=autonomy,
        overrides=override_map,
        guardrails=rules,
        model=model,
        timeout=timeout,
        actor=current_actor(),
    )
    click.echo(f"Policy {policy.label} set: {describe_policy(policy)}")
    _warn_if_off(runtime)
    start_for_waiting_items(runtime)


def start_for_waiting_items(runtime: Runtime) -> None:
    """Items already waiting that the supervisor is now to decide (a policy covers them, and
    it has not decided on them yet) get it at once; say for how many."""
    from shep.supervisor.start import start_for_waiting

    waiting = start_for_waiting(runtime)
    if waiting:
        click.echo(
            f"Started the supervisor for the {waiting} item(s) waiting in the inbox "
            "(its output: $SHEP_HOME/logs/supervisor.log)."
        )


def describe_policy(policy: Policy) -> str:
    """A policy in one line."""
    parts = [policy.autonomy]
    parts += [f"{kind} {level}" for kind, level in sorted(policy.overrides.items())]
    parts += describe_rules(policy.guardrails)
    if policy.model:
        parts.append(f"model {policy.model}")
    parts.append(f"timeout {policy.timeout:g}s")
    return ", ".join(parts)


def describe_rules(rules: Guardrails) -> list[str]:
    parts = []
    if rules.max_diff_lines is not None:
        parts.append(f"at most {counted(rules.max_diff_lines, 'changed line')}")
    if rules.max_files_changed is not None:
        parts.append(f"at most {counted(rules.max_files_changed, 'changed file')}")
    if rules.blocked_paths:
        parts.append("blocked " + " ".join(rules.blocked_paths))
    if rules.tests_must_pass:
        parts.append("tests must pass")
    if rules.auto_approve:
        parts.append("auto-approve when every rule passes")
    return parts


def _warn_if_off(runtime: Runtime) -> None:
    from shep.home.settings import load_settings

    if not load_settings(runtime.store()).flags["collaboration"]:
        click.echo(
            "shep: note: the supervisor is off until `shep settings flags enable collaboration`.",
            err=True,
        )


@supervisor.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print the policies as JSON.")
@click.pass_obj
def show(runtime: Runtime, as_json: bool) -> None:
    """Show every scope's policy, and whether the supervisor is on."""
    from commands.policies import load_policies
    from shep.home.settings import load_settings

    if not runtime.has_store():
        click.echo("[]" if as_json else "No policy is set.")
        return
    store = runtime.store()
    policies = sorted(load_policies(store).values(), key=lambda p: _specificity(p.scope))
    if as_json:
        data = [p.as_dict() for p in policies]
        click.echo(msgspec.json.format(msgspec.json.encode(data).decode(), indent=2))
        return
    on = load_settings(store).flags["collaboration"]
    click.echo(f"collaboration: {'on' if on else 'off'}")
    if not policies:
        click.echo("No policy is set: `shep supervisor configure --autonomy ...` sets one.")
    for policy in policies:
        state = "" if policy.enabled else "  (disabled)"
        click.echo(f"{policy.label}{state}: {describe_policy(policy)}")


def _specificity(scope: str) -> tuple[int, str]:
    return ({"global": 0, "repo": 1, "run": 2}.get(scope.split(":", 1)[0], 3), scope)


@supervisor.command("enable")
@_SCOPE
@click.pass_obj
def enable(runtime: Runtime, scope: str) -> None:
    """Apply SCOPE's policy again."""
    _toggle(runtime, scope, True)


@supervisor.command("disable")
@_SCOPE
@click.pass_obj
def disable(runtime: Runtime, scope: str) -> None:
    """Stop applying SCOPE's policy (a less specific enabled one then covers its items)."""
    _toggle(runtime, scope, False)


def _toggle(runtime: Runtime, scope: str, on: bool) -> None:
    from commands.policies import set_policy_enabled
    from shep.home.identity import current_actor

    policy = set_policy_enabled(runtime.store(), _scope(runtime, scope), on, actor=current_actor())
    click.echo(f"Policy {policy.label} {'enabled' if on else 'disabled'}.")
    if on:
        start_for_waiting_items(runtime)


@supervisor.command("run")
@click.option("--follow", is_flag=True, help="Keep deciding new items until interrupted.")
@click.option("--background", is_flag=True, hidden=True)
@click.pass_obj
def run(runtime: Runtime, follow: bool, background: bool) -> None:
    """Decide every item a policy covers that is waiting, in the foreground; then exit."""
    from shep.supervisor.loop import OFF, Supervisor, collaboration_on, supervisor_lock

    # Off (or no store yet: off by default): say so before touching anything.
    if not runtime.has_store() or not collaboration_on(runtime.store()):
        raise SupervisorOffError(OFF)
    store = runtime.store()
    with supervisor_lock(runtime.home):
        from shep.supervisor.agent import stop_stray_evaluators

        for pid in stop_stray_evaluators():
            click.echo(f"shep: stopped evaluator {pid}: its supervisor is gone.", err=True)
        sup = Supervisor(
            store,
            _evaluator(runtime),
            resume=lambda run_id: _resume(runtime, run_id),
            report=lambda line: click.echo(printable(line)),
            waiting=lambda: _waiting(runtime),
        )
        if follow:
            try:
                sup.follow()
            except KeyboardInterrupt:
                return
        else:
            sup.drain()
    if not sup.handled and not background:
        click.echo("Nothing to decide.")


def _waiting(runtime: Runtime) -> list[UUID]:
    """The items waiting in the inbox, oldest first, from the home's read model (caught up)."""
    from projections.catch_up import catch_up
    from projections.inbox_queries import list_inbox

    conn = runtime.read_db()
    catch_up(conn)
    return [UUID(item["item_id"]) for item in list_inbox(conn)]


class _LazyEvaluator:
    """The agent evaluator, created on first use: items the guardrails decide need none."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._agent: Any = None
        self.name = self._settings().agent_type or "unconfigured"

    def _settings(self) -> Any:
        from shep.home.settings import load_settings

        return load_settings(self.runtime.store())

    def __call__(self, prompt: str, *, model: str | None, timeout: float) -> str:
        if self._agent is None:
            from shep.supervisor.agent import AgentEvaluator

            self._agent = AgentEvaluator(self.runtime.home, self._settings())
        text: str = self._agent(prompt, model=model, timeout=timeout)
        return text


def _evaluator(runtime: Runtime) -> _LazyEvaluator:
    return _LazyEvaluator(runtime)


def _resume(runtime: Runtime, run_id: UUID) -> None:
    from events.errors import ShepError
    from shep.cli.run import render
    from shep.runs.decisions import resume_after_decision

    try:
        render(resume_after_decision(runtime, run_id.hex, wait=False), quiet=True)
    except ShepError as e:
        # The decision is in the log: the next shep command resumes the run.
        click.echo(f"shep: {e}", err=True)


@supervisor.command("why")
@click.argument("ref", metavar="RUN|ITEM")
@click.option("--json", "as_json", is_flag=True, help="Print the decisions as JSON.")
@click.pass_obj
def why(runtime: Runtime, ref: str, as_json: bool) -> None:
    """Every decision on RUN's items (or on ITEM): who, the rules that fired, why, the versions."""
    from shep.supervisor.history import decisions_for, render_decision

    rows = decisions_for(runtime, ref)
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(rows).decode(), indent=2))
        return
    if not rows:
        click.echo("No decision was made on it yet.")
        return
    for row in rows:
        click.echo(render_decision(row))


@supervisor.command("what-if")
@click.option(
    "--policy",
    "policy_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The policy to try (YAML or JSON, as `configure --policy` reads).",
)
@click.option(
    "--since",
    type=click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]),
    help="Only items asked since DATE (UTC).",
)
@click.option("--with-llm", is_flag=True, help="Consult the evaluator too (calls the agent).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per item.")
@click.option("--all", "show_all", is_flag=True, help="Show unchanged items too.")
@click.pass_obj
def what_if(
    runtime: Runtime,
    policy_file: Path,
    since: datetime | None,
    with_llm: bool,
    as_json: bool,
    show_all: bool,
) -> None:
    """Re-evaluate past items under another policy and show which decisions would change.

    Guardrails only unless --with-llm. Nothing is written to the log.
    """
    from shep.supervisor.whatif import what_if_rows

    read = read_policy_file(policy_file)
    if not runtime.has_store():
        click.echo("[]" if as_json else "No item was ever asked.")
        return
    evaluator = _evaluator(runtime) if with_llm else None
    rows = what_if_rows(runtime.store(), read, since=since, evaluator=evaluator)
    if as_json:
        for row in rows:
            click.echo(msgspec.json.encode(row).decode())
        return
    changed = [r for r in rows if r["changed"]]
    for row in rows if show_all else changed:
        mark = "CHANGED" if row["changed"] else "same"
        click.echo(
            printable(
                f"{row['item'][:8]}  run {row['run'][:8]}  {row['kind']:<8} {mark:<7}  "
                f"was: {row['was']}  would: {row['would']}"
            )
        )
        if row["rationale"]:
            click.echo(printable(f"    {row['rationale']}"))
    click.echo(
        f"{len(changed)} of {counted(len(rows), 'decision')} would change under {policy_file.name}."
    )
