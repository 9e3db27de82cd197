"""``shep settings``: choose the agent shep drives, and plain settings."""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
import msgspec

from events.errors import SettingsError
from events.setting_values import (
    HEARTBEATS_PER_ORPHAN_AFTER,
    SETTINGS,
    WORKFLOW_SETTINGS,
    SettingValue,
    checked_value,
    show_value,
)
from shep.home.runtime import Runtime

if TYPE_CHECKING:
    from shep.home.settings import Settings


@click.group()
@click.pass_context
def settings(ctx: click.Context) -> None:
    """Configure the agent CLI shep drives, and other settings."""
    damaged = ctx.obj.store_file_error if isinstance(ctx.obj, Runtime) else None
    if damaged is not None and ctx.invoked_subcommand != "store":
        raise damaged


@dataclass
class AgentChoice:
    agent_type: str
    auth_method: str
    token: str | None
    model: str | None


def _specs() -> dict[str, Any]:
    from shep.agents import AGENT_SPECS

    return dict(AGENT_SPECS)


class AgentTypeChoice(click.Choice[str]):
    """The registered agent types as click choices, read from the registry only when needed.

    `shep --help` imports this module for the group's one-line help; the
    registry imports every executor module, which it must not pay for. The
    choices are read when --agent is given or `settings agent --help` is shown.
    """

    def __init__(self) -> None:
        # Not Choice.__init__: it would need the choices now.
        self.case_sensitive = True

    # A computed, cached stand-in for the attribute Choice.__init__ would have set.
    @functools.cached_property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(sorted(_specs()))

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """The agent type; an unknown one is a one-line ``SettingsError`` naming the known ones."""
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            known = ", ".join(self.choices)
            raise SettingsError(f"Unknown agent type {value!r}. Known: {known}.") from None


@settings.command("agent")
@click.option("--agent", "agent_type", type=AgentTypeChoice(), help="The agent CLI to drive.")
@click.option(
    "--auth",
    "auth_method",
    type=click.Choice(["session", "token"]),
    help="session: the agent CLI's own login; token: an API key shep passes in its environment.",
)
@click.option("--token-stdin", is_flag=True, help="Read the API token from standard input.")
@click.option("--model", help="The agent's default model (`shep run --model` overrides it).")
@click.option("--binary", type=click.Path(dir_okay=False), help="Path of the agent's executable.")
@click.pass_obj
def agent(
    runtime: Runtime,
    agent_type: str | None,
    auth_method: str | None,
    token_stdin: bool,
    model: str | None,
    binary: str | None,
) -> None:
    """Choose the agent CLI shep drives, check it is installed, and store its token apart.

    With no options on a terminal, a short wizard asks. The token is never an
    option: type it in the wizard (hidden) or pipe it with --token-stdin. It is
    kept in $SHEP_HOME/secrets (mode 0600), never in the event log.
    """
    from commands.configure_agent import configure_agent
    from shep.agents import probe_version
    from shep.home.identity import current_actor
    from shep.home.secrets import save_token

    if binary is not None:
        try:
            binary.encode()  # recorded as text in AgentConfigured
        except UnicodeEncodeError as e:
            raise SettingsError(
                f"Binary {os.fsencode(binary)!r} is not valid UTF-8. Rename it, or link to it "
                "from a path that is valid UTF-8."
            ) from e
    specs = _specs()
    if agent_type is None and auth_method is None and not token_stdin and model is None:
        if not sys.stdin.isatty():
            raise SettingsError("No terminal for the wizard: pass --agent TYPE (and --auth).")
        choice = run_wizard(specs)
    else:
        if agent_type is None:
            raise SettingsError("Pass --agent TYPE. Known: " + ", ".join(sorted(specs)) + ".")
        token = _read_token_stdin() if token_stdin else None
        method = auth_method or ("token" if token else "session")
        choice = AgentChoice(agent_type, method, token, model)
    if choice.auth_method == "token" and not choice.token:
        raise SettingsError("--auth token needs a token: pipe it with --token-stdin.")
    if choice.auth_method == "session" and choice.token:
        raise SettingsError("A token was given with --auth session; use --auth token.")
    version = probe_version(choice.agent_type, binary)
    store = runtime.store()
    save_token(runtime.home, choice.agent_type, choice.token)
    configure_agent(
        store,
        agent_type=choice.agent_type,
        auth_method=choice.auth_method,
        configured_by=current_actor(),
        model=choice.model,
        binary=binary,
        binary_version=version,
        token_configured=choice.token is not None,
    )
    model_text = choice.model or "the agent's default"
    click.echo(
        f"Configured {choice.agent_type} {version} (auth: {choice.auth_method}, "
        f"model: {model_text})."
    )


def _read_token_stdin() -> str:
    token = sys.stdin.readline().strip()
    if not token:
        raise SettingsError("--token-stdin read an empty token.")
    return token


def run_wizard(
    specs: dict[str, Any],
    *,
    input: Any = None,
    output: Any = None,
) -> AgentChoice:
    """Ask for agent type, auth method, token (hidden) and model; prompt-toolkit drives it.

    ``input``/``output`` let tests drive it through prompt-toolkit's pipe input.
    """
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import WordCompleter
    from prompt_toolkit.validation import Validator

    def ask(message: str, **options: Any) -> str:
        # A fresh session per prompt: a session keeps the options of its last prompt
        # (is_password, the validator), which would mask and bound the next one.
        session: PromptSession[str] = PromptSession(input=input, output=output)
        return session.prompt(message, **options).strip()

    lines = ["Agent CLIs:"]
    for name, spec in sorted(specs.items()):
        if not spec.binary:
            mark = "built in"
        else:
            mark = "installed" if shutil.which(spec.binary) else "not installed"
        lines.append(f"  {name:<12} {spec.label} ({mark})")
    listing = PromptSession[str](input=input, output=output).app.output
    listing.write(("\n".join(lines) + "\n").replace("\x1b", "?"))
    agent_type = ask(
        "Agent type: ",
        completer=WordCompleter(sorted(specs)),
        validator=Validator.from_callable(
            lambda text: text.strip() in specs,
            error_message="Choose one of the agent types above.",
            move_cursor_to_end=True,
        ),
    )
    auth_method = (
        ask(
            "Auth method (session = the CLI's own login, token = API key) [session]: ",
            validator=Validator.from_callable(
                lambda text: text.strip() in ("", "session", "token"),
                error_message="Type session or token.",
                move_cursor_to_end=True,
            ),
        )
        or "session"
    )
    token = None
    if auth_method == "token":
        token = ask(
            "API token (hidden): ",
            is_password=True,
            validator=Validator.from_callable(
                lambda text: bool(text.strip()),
                error_message="The token cannot be empty.",
                move_cursor_to_end=True,
            ),
        )
    model = ask("Default model (empty: the agent's default): ") or None
    return AgentChoice(agent_type, auth_method, token, model)


def _set_help() -> str:
    width = max(map(len, SETTINGS))
    lines = [f"  {name:<{width}} {spec.describe()}: {spec.help}" for name, spec in SETTINGS.items()]
    return (
        "Change a plain setting KEY to VALUE: seconds, on/off, a count, or text.\n\n"
        "\b\n" + "\n".join(lines) + "\n\n"
        "An on/off setting also takes true/false, yes/no or 1/0. "
        f"heartbeat_interval must stay at most orphan_after / {HEARTBEATS_PER_ORPHAN_AFTER}, "
        "so that a live run is never taken for an orphan: to go beyond, change the other "
        "one first.\n\n"
        "notify_command is cut into words as a shell would (quotes, backslashes) but run "
        "without a shell: no pipes, redirections or $VARIABLES (name a script for those). "
        "Each new inbox item is written to its standard input as one JSON object: item_id, "
        "kind, run_id, workflow, repo, node, iteration, prompt, options, artifacts, "
        "deadline, and the shep commands that decide it. If it fails, or runs longer than "
        "notify_timeout (then its process group is killed), that is recorded in the run's "
        "logs; the run goes on regardless. Set it to '' to turn it off.\n\n"
        "The feature workflow's settings (feature_fast to git_filters) can also be "
        "shown and set together with `shep settings workflow`. merge_hooks and "
        "git_filters are off unless you turn them on: shep's own git then runs nothing "
        "the repository or the agent wrote (no hook, no fsmonitor, no filter or merge "
        "driver). merge_hooks runs your repository's hooks (post-merge, "
        "reference-transaction...) when shep moves your branch to the squash commit and "
        "deletes the feature branch, hooks the merged files may have just changed; "
        "git_filters lets git run the filter and merge drivers your git config defines "
        "(git-lfs needs it)."
    )


# Negative values reach VALUE (and its bounds check) instead of being taken for options.
@settings.command("set", help=_set_help(), context_settings={"ignore_unknown_options": True})
@click.argument("key")
@click.argument("value")
@click.pass_obj
def set_command(runtime: Runtime, key: str, value: str) -> None:
    from commands.configure_agent import change_setting
    from shep.home.identity import current_actor

    event = change_setting(runtime.store(), key=key, value=value, changed_by=current_actor())
    click.echo(f"{key} = {show_value(SETTINGS[key].parse(key, event.value))}")
    if key == "notify_command" and event.value:
        _warn_if_not_found(event.value)


def _warn_if_not_found(command: str) -> None:
    """Warn (not refuse: a worker may see another PATH) when the command cannot be found here."""
    import shlex

    program = shlex.split(command)[0]
    if shutil.which(program) is None:
        click.echo(
            f"shep: warning: {program!r} is not an executable found on PATH here; "
            "notifications will fail (and say so in `shep logs`) until it is.",
            err=True,
        )


@settings.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show(runtime: Runtime, as_json: bool) -> None:
    """Show the configured agent and settings. The token is masked."""
    from shep.home.settings import read_settings

    current = read_settings(runtime.read_db())
    values = current.every()
    _warn_skipped(current, SETTINGS)
    agent = {
        "agent_type": current.agent_type,
        "auth_method": current.auth_method,
        "model": current.model,
        "binary": current.binary,
        "binary_version": current.binary_version,
        "token": _token_shown(runtime, current),
    }
    if as_json:
        data = {**agent, **values}
        click.echo(msgspec.json.format(msgspec.json.encode(data).decode(), indent=2))
        return
    if current.agent_type is None:
        click.echo("agent: not configured (run `shep settings agent`)")
    for key, text in agent.items():
        if text is not None:
            click.echo(f"{key}: {text}")
    for key, value in values.items():
        click.echo(f"{key}: {show_value(value)}")


def _token_shown(runtime: Runtime, current: Settings) -> str | None:
    """Masked; or where it is missing (a shared store's settings reach machines without it)."""
    from shep.home.secrets import load_token

    if not current.token_configured or current.agent_type is None:
        return None
    if load_token(runtime.home, current.agent_type) is None:
        return "not on this machine (store it: shep settings agent --auth token --token-stdin)"
    return "********"


def _warn_skipped(current: Settings, keys: Iterable[str]) -> None:
    """Say, on stderr, which recorded values of ``keys`` are ignored and how to repair them."""
    values = current.every()
    wanted = set(keys)
    for skipped in current.skipped:
        if skipped.key not in wanted:
            continue
        click.echo(
            f"shep: ignoring a recorded setting: {skipped.reason} It stays "
            f"{show_value(values[skipped.key])}; change it with "
            f"`shep settings set {skipped.key} {SETTINGS[skipped.key].placeholder}`.",
            err=True,
        )


@settings.group("flags", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the flags as JSON.")
@click.pass_context
def flags(ctx: click.Context, as_json: bool) -> None:
    """List the feature flags (off by default); `enable NAME` or `disable NAME` toggles one."""
    if ctx.invoked_subcommand is not None:
        return
    from events.setting_values import FEATURE_FLAGS
    from shep.home.settings import read_settings

    runtime: Runtime = ctx.obj
    current = read_settings(runtime.read_db()) if runtime.has_store() else None
    rows = [
        {
            "name": name,
            "enabled": current.flags[name] if current else SETTINGS[name].default,
            "help": SETTINGS[name].help,
        }
        for name in FEATURE_FLAGS
    ]
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(rows).decode(), indent=2))
        return
    for row in rows:
        click.echo(f"{row['name']:<16} {'on ' if row['enabled'] else 'off'}  {row['help']}")


def _toggle_flag(runtime: Runtime, name: str, on: bool) -> None:
    from commands.configure_agent import change_setting
    from events.setting_values import FEATURE_FLAGS
    from shep.home.identity import current_actor

    if name not in FEATURE_FLAGS:
        raise SettingsError(f"Unknown feature flag {name!r}. Known: {', '.join(FEATURE_FLAGS)}.")
    change_setting(
        runtime.store(), key=name, value="on" if on else "off", changed_by=current_actor()
    )
    click.echo(f"{name} = {'on' if on else 'off'}")
    if name == "collaboration" and on:
        from shep.cli.supervisor import start_for_waiting_items

        start_for_waiting_items(runtime)


@flags.command("enable")
@click.argument("name")
@click.pass_obj
def enable_flag(runtime: Runtime, name: str) -> None:
    """Turn feature flag NAME on."""
    _toggle_flag(runtime, name, True)


@flags.command("disable")
@click.argument("name")
@click.pass_obj
def disable_flag(runtime: Runtime, name: str) -> None:
    """Turn feature flag NAME off."""
    _toggle_flag(runtime, name, False)


#: The gates --allow-all and --no-allow-all set, unless their own option is given too.
ALLOW_ALL = ("allow_prd", "allow_plan", "allow_merge")


@settings.command("workflow")
@click.option("--json", "as_json", is_flag=True, help="Print the workflow settings as JSON.")
@click.option(
    "--fast/--no-fast",
    "feature_fast",
    default=None,
    help="feature_fast: `shep feat new` implements straight from the description.",
)
@click.option(
    "--allow-prd/--no-allow-prd", default=None, help="allow_prd: skip the PRD approval gate."
)
@click.option(
    "--allow-plan/--no-allow-plan", default=None, help="allow_plan: skip the plan approval gate."
)
@click.option(
    "--allow-merge/--no-allow-merge",
    default=None,
    help="allow_merge: skip the merge approval gate.",
)
@click.option(
    "--allow-all/--no-allow-all",
    default=None,
    help="Set allow_prd, allow_plan and allow_merge at once (their own options win).",
)
@click.option(
    "--requirements-iterations",
    metavar="N",
    help="requirements_iterations: rounds of open questions before the run fails (1 to 20).",
)
@click.option(
    "--branch-prefix", metavar="PREFIX", help="branch_prefix: the start of each feature branch."
)
@click.option(
    "--setup-command",
    "worktree_setup_command",
    metavar="'COMMAND ARG...'",
    help="worktree_setup_command: run in each new feature worktree ('': nothing).",
)
@click.option(
    "--setup-timeout",
    "worktree_setup_timeout",
    metavar="SECONDS",
    help="worktree_setup_timeout: seconds the setup command may run.",
)
@click.option(
    "--test-command",
    metavar="'COMMAND ARG...'",
    help="test_command: runs a feature's tests ('': shep detects one).",
)
@click.option(
    "--test-timeout", metavar="SECONDS", help="test_timeout: seconds the test command may run."
)
@click.option(
    "--merge-hooks/--no-merge-hooks",
    default=None,
    help="merge_hooks: run the repository's git hooks at the merge into your branch.",
)
@click.option(
    "--git-filters/--no-git-filters",
    default=None,
    help="git_filters: let git run your config's filter and merge drivers (git-lfs).",
)
@click.pass_obj
def workflow(
    runtime: Runtime, /, as_json: bool, allow_all: bool | None, **options: bool | str | None
) -> None:
    """Show the feature workflow's settings, or change those given as options.

    Without options, prints each setting, its value and what it does. Each
    option is recorded as `shep settings set` records it, with the same checks;
    all of them are checked first, so a bad one records none of them.
    """
    from shep.home.settings import load_settings, read_settings

    changes = _workflow_changes(allow_all, options)
    if not changes:
        shown = read_settings(runtime.read_db())
        _warn_skipped(shown, WORKFLOW_SETTINGS)
        _print_workflow(shown.every(), as_json)
        return
    store = runtime.store()
    current = load_settings(store)
    from commands.configure_agent import change_setting
    from shep.home.identity import current_actor

    for key, text in changes.items():
        checked_value(current.values, key, text)
    actor = current_actor()
    recorded = [
        change_setting(store, key=key, value=text, changed_by=actor)
        for key, text in changes.items()
    ]
    if as_json:
        _print_workflow(load_settings(store).every(), as_json)
        return
    for event in recorded:
        click.echo(f"{event.key} = {show_value(SETTINGS[event.key].parse(event.key, event.value))}")


def _workflow_changes(
    allow_all: bool | None, options: dict[str, bool | str | None]
) -> dict[str, str]:
    """The ``settings set`` KEY and VALUE of each option given, in ``WORKFLOW_SETTINGS`` order."""
    given = {key: value for key, value in options.items() if value is not None}
    if allow_all is not None:
        for key in ALLOW_ALL:
            given.setdefault(key, allow_all)
    return {
        key: ("on" if given[key] else "off") if isinstance(given[key], bool) else str(given[key])
        for key in WORKFLOW_SETTINGS
        if key in given
    }


def _print_workflow(values: dict[str, SettingValue], as_json: bool) -> None:
    if as_json:
        data = {key: values[key] for key in WORKFLOW_SETTINGS}
        click.echo(msgspec.json.format(msgspec.json.encode(data).decode(), indent=2))
        return
    shown = {key: show_value(values[key]) for key in WORKFLOW_SETTINGS}
    key_width = max(map(len, shown))
    value_width = max(map(len, shown.values()))
    for key, text in shown.items():
        click.echo(f"{key:<{key_width}}  {text:<{value_width}}  ({SETTINGS[key].help})")


# `shep settings store`: where the log lives (shep/cli/store.py, beside `shep store migrate`).
from shep.cli.store import store_command  # noqa: E402

settings.add_command(store_command)
