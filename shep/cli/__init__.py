"""The ``shep`` command line: a root group that loads each command module only when used.

Domain errors become one line on stderr and an exit code here, and only
here; ``--debug`` (or ``SHEP_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import Any

import apsw
import click

from events.display import printable
from events.errors import ShepError, StoreError
from events.sqlite_file import home_from_env, store_error
from events.words import counted
from shep.cli.render import ProgressLine, say_on_stderr
from shep.home.runtime import Runtime

#: command name -> "module:attribute"; modules are imported only when their command runs.
COMMANDS: dict[str, str] = {
    "status": "shep.cli.status:status",
    "logs": "shep.cli.logs:logs",
    "projections": "shep.cli.projections:projections",
    "audit": "shep.cli.audit:audit",
    "settings": "shep.cli.settings:settings",
    "run": "shep.cli.run:run",
    "resume": "shep.cli.run:resume",
    "cancel": "shep.cli.run:cancel",
    "workflows": "shep.cli.run:workflows",
    "_worker": "shep.cli.run:worker",
    "_await": "shep.cli.run:await_decision",
    "_keep": "shep.cli.keep:keep",
    "demo": "shep.cli.demo:demo",
    "inbox": "shep.cli.inbox:inbox",
    "answer": "shep.cli.inbox:answer",
    "approve": "shep.cli.inbox:approve",
    "reject": "shep.cli.inbox:reject",
    "feat": "shep.cli.feat:feat",
    "replay": "shep.cli.replay:replay",
    "fork": "shep.cli.fork:fork",
    "supervisor": "shep.cli.supervisor:supervisor",
    "store": "shep.cli.store:store",
    "ui": "shep.cli.ui:ui",
    "doctor": "shep.cli.doctor:doctor",
}

INTERNAL_ERROR_EXIT = 70
#: ``ctx.meta`` key: the command line asks only for a command's help.
_HELP_ONLY = "shep.help_only"
_INBOX_COMMANDS = frozenset({"inbox", "answer", "approve", "reject"})
#: ``ctx.meta`` key: how many items wait in the inbox, said after the command succeeded.
_INBOX_PENDING = "shep.inbox_pending"
#: Commands that must not touch the store before they run.
#: `audit` reads the log alone, read-only, so it works on a damaged or read-only store.
#: `replay` writes nothing at all (the orphan check would append events).
#: `supervisor` decides items of any run: a run it resumes is started by it, not orphaned.
#: `doctor` reports on the home as it is, and changes nothing of it.
_NO_ORPHAN_CHECK = frozenset(
    {"_worker", "_await", "_keep", "workflows", "demo", "audit", "replay", "supervisor", "doctor"}
)
#: Commands that only read: on a shared store they read this home's copy of the log as it
#: is while a keeper keeps it current (``projections.keeper``), and start one when none runs.
_READERS = frozenset({"status", "inbox", "logs", "replay"})
#: Commands that run on a damaged ``$SHEP_HOME/store``: the one that rewrites it, the one
#: that reports it.
_REPAIRING = frozenset({"settings", "doctor"})

#: Driver errors that say the store itself failed (anything else is a bug of ours).
_STORE_FAILURES = (
    apsw.CorruptError,
    apsw.NotADBError,
    apsw.CantOpenError,
    apsw.ReadOnlyError,
    apsw.PermissionsError,
    apsw.FullError,
    apsw.BusyError,
    apsw.IOError,
)


class _ReaderGone(Exception):
    """The reader of our output went away (`shep logs | head`).

    A ``BrokenPipeError`` inside a command is caught by click, which exits 1;
    wrapped in this (no ``OSError``) it reaches ``main``, which exits 0.
    """


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use, so ``shep --help`` stays fast."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
        except BrokenPipeError as e:
            raise _ReaderGone() from e
        if ctx.meta.get(_INBOX_PENDING):
            # Said once the command succeeded (a failing command's error stays its only
            # line), counted and as the settings are now (`shep settings set inbox_notice
            # off`); a notice that cannot be read fails nothing.
            from shep.runs.inbox_watch import inbox_notice

            try:
                notice = inbox_notice(ctx.obj)
            except (ShepError, apsw.Error):
                notice = None
            if notice is not None:
                click.echo(notice, err=True)
        return result

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:
            # `shep` alone is a person asking what shep does: the help, exit 0.
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        # Read before the group's callback, which must not act when a command's help is
        # all that was asked for (click parses a subcommand's --help only after it).
        ctx.meta[_HELP_ONLY] = _asks_for_help(args)
        return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if ctx.resilient_parsing or name.startswith("-") or self.get_command(ctx, name):
            return super().resolve_command(ctx, args)
        # click suggests only among the commands it holds, and this group holds them lazily.
        import difflib

        public = [c for c in self.list_commands(ctx) if not c.startswith("_")]
        close = difflib.get_close_matches(name, public, n=3, cutoff=0.6)
        hint = ""
        if len(close) == 1:
            hint = f" Did you mean {close[0]!r}?"
        elif close:
            hint = f" Did you mean one of: {', '.join(map(repr, close))}?"
        ctx.fail(f"No such command {name!r}.{hint}")

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, attr = self.lazy[cmd_name].split(":")
            command = getattr(importlib.import_module(module_name), attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        # Imported only when asked: the store's versions are read from it, read-only.
        from shep.cli.doctor import print_version

        print_version(ctx, param, value)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors (also SHEP_DEBUG=1).")
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show shep's version, the versions of what it stores, and the store's; then exit.",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Run AI coding agents through workflows on your repository, and keep a record of all of it.

    Everything shep does is an event in an append-only log under $SHEP_HOME
    (default ~/.shep); status, logs and the audit trail are read from it.
    """
    if ctx.meta.get(_HELP_ONLY):
        return  # a command's help: no store is opened, no run marked, no deadline applied
    # `shep settings store` must still work when the file it rewrites is damaged.
    ctx.obj = Runtime.from_environment(
        debug=debug, repairing=ctx.invoked_subcommand in _REPAIRING, say=say_on_stderr
    )
    ctx.obj.on_progress = ProgressLine()  # a projection this shep changed is rebuilt first
    ctx.obj.reads_only = ctx.invoked_subcommand in _READERS
    ctx.call_on_close(ctx.obj.close)
    if ctx.obj.store_file_error is not None:
        return  # the settings group refuses every command but the repair
    if ctx.invoked_subcommand not in _NO_ORPHAN_CHECK and not ctx.resilient_parsing:
        try:
            ctx.meta[_INBOX_PENDING] = _look_for_work(ctx.obj, ctx.invoked_subcommand)
        except StoreError:
            if ctx.invoked_subcommand not in _REPAIRING:
                raise
            # `shep settings` points a home elsewhere, so it runs on a store it cannot read
            # (a shared store's copy made from another log): it says so itself if it reads.


def _look_for_work(runtime: Runtime, command: str | None) -> int:
    """Mark the runs whose worker is gone, act on the inbox (``check_inbox``); how many
    items wait in it, for the command to mention once it has succeeded (0: say nothing)."""
    interrupted: list[str] = []
    if runtime.may_have_orphans():  # one indexed look; most of the time nothing runs
        from shep.runs.recovery import mark_orphans

        interrupted = mark_orphans(runtime)
    if interrupted:
        click.echo(_interrupted_notice(interrupted, command), err=True)
    if not runtime.inbox_busy():  # one indexed look; most of the time nothing waits
        return 0
    from shep.runs.inbox_watch import check_inbox

    pending = check_inbox(runtime)
    # The inbox commands show or decide the items themselves; the others mention them.
    return 0 if command in _INBOX_COMMANDS else pending


def _asks_for_help(args: list[str]) -> bool:
    """Whether the command line asks for a command's help (before any ``--``)."""
    for arg in args:
        if arg == "--":
            return False
        if arg in ("--help", "-h"):
            return True
    return False


def _interrupted_notice(run_ids: list[str], command: str | None) -> str:
    """What to do about the runs this command found interrupted: resume them."""
    if len(run_ids) == 1:
        return f"1 interrupted run: shep resume {run_ids[0][:8]}"
    if command == "status":  # the runs are in the table just below
        return f"{counted(len(run_ids), 'interrupted run')}: shep resume RUN"
    return (
        f"{counted(len(run_ids), 'interrupted run')}: `shep status` lists them, "
        "`shep resume RUN` continues one"
    )


def _debug_requested(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("SHEP_DEBUG", "") not in ("", "0")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script: run the CLI and turn errors into exit codes."""
    if argv is None:
        # The process's entry point (the console script, `python -m shep`), not a caller
        # in a process of its own: what is imported by now (click, apsw, msgspec, this
        # module, the read side) lives as long as the process, and the collector need not
        # look at it again, in the command or at exit, when Python's last collection
        # would otherwise go through all of it (a few ms, a tenth of `shep status`).
        gc.freeze()
    args = sys.argv[1:] if argv is None else argv
    debug = _debug_requested(args)
    try:
        try:
            cli.main(args=args, prog_name="shep", standalone_mode=False)
        except _STORE_FAILURES as e:
            # Commands read the projections with SQL of their own: a damaged page
            # fails wherever it is read, and is the store's error, not shep's.
            raise store_error(e, os.path.join(home_from_env(), "shep.db")) from e
    except ShepError as e:
        if debug:
            _print_traceback()
        # Messages may quote an agent's or a repository's words.
        click.echo(f"shep: {printable(e)}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("shep: aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("shep: interrupted", err=True)
        sys.exit(130)
    except (BrokenPipeError, _ReaderGone):
        # The reader of our output went away (`shep logs | head`); that is not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
    except Exception as e:
        if debug:
            _print_traceback()
        click.echo(
            printable(
                f"shep: internal error: {type(e).__name__}: {e} "
                "(run with --debug for the traceback)"
            ),
            err=True,
        )
        sys.exit(INTERNAL_ERROR_EXIT)


def _print_traceback() -> None:
    import traceback

    traceback.print_exc()
