"""Where a home's event log lives: ``shep settings store`` shows or chooses it (shep.db, or a
shared PostgreSQL store), and ``shep store migrate`` copies a home's SQLite log into an
empty shared store."""

from __future__ import annotations

import os
import sys
from itertools import islice
from typing import TYPE_CHECKING, Any

import click
import msgspec

from events.words import counted, events_verify
from shep.home.runtime import Runtime

if TYPE_CHECKING:
    import apsw

    from events.store import EventStore

_BATCH = 5000


@click.group("store")
def store() -> None:
    """The event log itself: move a home's log into a shared store."""


@store.command("migrate")
@click.option(
    "--to",
    "target",
    metavar="URL",
    help="postgresql://USER@HOST:PORT/DB (no password: PGPASSWORD or ~/.pgpass); "
    "default: the store this home points at (`shep settings store`).",
)
@click.option("--to-stdin", is_flag=True, help="Read the target URL from standard input.")
@click.pass_obj
def migrate(runtime: Runtime, target: str | None, to_stdin: bool) -> None:
    """Copy $SHEP_HOME/shep.db into an empty shared store, position for position.

    The chain is verified on both sides and both head hashes are printed: they
    are equal, since every event keeps its position and its hash. A target that
    already holds events is refused; the source is only read.
    """
    from events.audit import open_log, verify_chain
    from events.errors import ChainBrokenError, SettingsError, StoreError, StoreUnavailableError
    from events.postgres_url import has_password, is_postgres_url, redacted, where
    from events.postgres_verify import verify_pg_chain
    from events.store import EventStore

    if to_stdin:
        if target is not None:
            raise SettingsError("Give --to or --to-stdin, not both.")
        target = sys.stdin.readline().strip()
    elif target is not None and has_password(target):
        raise SettingsError(
            "--to must not hold a password: it would show in the process list. "
            "Use PGPASSWORD, ~/.pgpass, or pipe the URL to --to-stdin."
        )
    target = target or runtime.store_url
    if target is None:
        raise SettingsError(
            "Give the shared store: shep store migrate --to postgresql://USER@HOST/DB "
            "(or point this home at it first with `shep settings store --url`)."
        )
    if not is_postgres_url(target):
        raise SettingsError(f"Not a PostgreSQL URL: {redacted(target)} (postgresql://...).")
    source = os.path.join(runtime.home_dir, "shep.db")
    if not os.path.exists(source):
        raise StoreUnavailableError(f"No event store at {source}: nothing to migrate.")

    conn = open_log(source)
    try:
        before = verify_chain(conn)
        if not before.ok:
            raise ChainBrokenError(
                f"{source} does not verify at position {before.first_bad_position} "
                f"({before.problem}): not migrated. Run `shep audit verify`."
            )
        with EventStore(target) as dest:
            if dest.schema.too_new is not None:
                raise dest.schema.too_new
            copied = _copy(conn, dest, where(target))
    finally:
        conn.close()
    after = verify_pg_chain(target)
    if not after.ok or after.head_hash != before.head_hash or after.events != before.events:
        raise StoreError(
            f"The copy at {where(target)} does not verify as the source does "
            f"({counted(after.events, 'event')}, head {after.head_hash.hex()}): "
            "investigate before using it."
        )
    click.echo(
        f"Copied {counted(copied, 'event')} from {source} to the shared store at {where(target)}."
    )
    click.echo(f"{source}: {events_verify(before.events)}. Head hash: {before.head_hash.hex()}")
    target_line = f"{where(target)}: {events_verify(after.events)}."
    click.echo(f"{target_line} Head hash: {after.head_hash.hex()}")
    if runtime.store_url != target:
        click.echo(
            "Next: point this home (and your team's) at it: shep settings store --url "
            f"{redacted(target)}"
        )


def _copy(conn: apsw.Connection, dest: EventStore, where: str) -> int:
    """Rows and non-projection tracking positions, in one transaction under the table lock.

    A server lost meanwhile is one ``StoreUnavailableError``: before the commit nothing
    was copied (the transaction dies with the connection), so the user just retries.
    """
    from eventsourcing.persistence import InterfaceError, OperationalError

    from events.errors import StoreUnavailableError

    committing = False
    try:
        with dest.datastore.transaction(commit=True) as curs:
            copied = _copy_rows(conn, dest, curs, where)
            committing = True  # what fails from here on may have been stored
    except (OperationalError, InterfaceError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if not committing:
            raise StoreUnavailableError(
                f"Lost the shared store at {where} during the copy ({reason}): the copy is "
                "one transaction, so nothing was copied; retry `shep store migrate` once it "
                "is back."
            ) from e
        raise StoreUnavailableError(
            f"Lost the shared store at {where} while committing the copy ({reason}): it may "
            "or may not be stored. Once the server is back, run `shep store migrate` again: "
            "it copies everything, or says the store already holds the events."
        ) from e
    return copied


def _copy_rows(conn: apsw.Connection, dest: EventStore, curs: Any, where: str) -> int:
    from events.errors import StoreError
    from projections.tables import PROJECTION_NAMES

    recorder = dest.recorder
    copied = 0
    recorder.lock_for_import(curs)
    held = curs.execute("SELECT count(*) AS n FROM stored_events").fetchone()
    if held and held["n"]:
        raise StoreError(
            f"The shared store at {where} already holds {counted(held['n'], 'event')}: "
            "migrate copies into an empty store only."
        )
    rows = conn.execute(
        "SELECT notification_id, originator_id, originator_version, topic, state, "
        "chain_hash FROM stored_events ORDER BY notification_id"
    )
    while batch := list(islice(rows, _BATCH)):
        curs.executemany(
            "INSERT INTO stored_events VALUES (%s, %s, %s, %s, %s, %s)",
            [(p, o, v, t, bytes(s), bytes(h)) for p, o, v, t, s, h in batch],
        )
        copied += len(batch)
    names = ",".join("?" * len(PROJECTION_NAMES))
    for name, position in conn.execute(
        f"SELECT application_name, notification_id FROM tracking "  # noqa: S608
        f"WHERE application_name NOT IN ({names})",
        PROJECTION_NAMES,
    ):
        recorder.track_in(curs, str(name), int(position))
    return copied


@click.command("store")
@click.option(
    "--url",
    metavar="URL",
    help="postgresql://USER@HOST:PORT/DB of the shared store. No password here (it would "
    "show in the process list): PGPASSWORD, ~/.pgpass, or --url-stdin.",
)
@click.option(
    "--url-stdin", is_flag=True, help="Read the URL (it may hold a password) from standard input."
)
@click.option("--local", is_flag=True, help="Back to this home's own SQLite file, shep.db.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def store_command(
    runtime: Runtime, url: str | None, url_stdin: bool, local: bool, as_json: bool
) -> None:
    """Show or choose where this home's event log lives: shep.db, or a shared PostgreSQL store.

    A team points every machine at one shared store: one inbox, one status, one
    audit trail. Each machine keeps a verified copy of the log and its read
    models in $SHEP_HOME/shared-cache-<store>.db, one per store. The URL is kept
    in $SHEP_HOME/store (0600, beside the tokens); SHEP_DATABASE_URL, when set,
    wins over it.
    Copy an existing shep.db into an empty shared store with `shep store migrate`.
    """
    from events.errors import SettingsError
    from events.postgres_url import has_password, is_postgres_url, redacted
    from shep.home.secrets import STORE_URL_ENV, save_store_url

    if sum((url is not None, url_stdin, local)) > 1:
        raise SettingsError("Give one of --url, --url-stdin and --local.")
    if runtime.store_file_error is not None and url is None and not (url_stdin or local):
        raise runtime.store_file_error
    if url_stdin:
        url = sys.stdin.readline().strip()
    if local:
        save_store_url(runtime.home, None)
        runtime = Runtime(
            runtime.home_dir, store_url=os.environ.get(STORE_URL_ENV), say=runtime.say
        )
    elif url is not None:
        if not is_postgres_url(url):
            raise SettingsError(f"Not a PostgreSQL URL: {redacted(url)} (postgresql://...).")
        if has_password(url) and not url_stdin:
            raise SettingsError(
                "--url must not hold a password: it would show in the process list. "
                "Use PGPASSWORD, ~/.pgpass, or pipe the URL to --url-stdin."
            )
        # Reach it (and create its tables) before saving: a typo fails here, not later.
        from events.store import EventStore

        with EventStore(url, on_notice=lambda line: click.echo(f"shep: {line}", err=True)) as store:
            store.max_position()
        save_store_url(runtime.home, url)
        runtime = Runtime(
            runtime.home_dir, store_url=os.environ.get(STORE_URL_ENV) or url, say=runtime.say
        )
    _print_store(runtime, as_json=as_json)


def _print_store(runtime: Runtime, *, as_json: bool) -> None:
    from events.postgres_url import redacted
    from shep.home.secrets import STORE_URL_ENV

    data: dict[str, Any]
    if runtime.store_url is None:
        data = {"store": "sqlite", "path": runtime.db_file}
    else:
        from projections.mirror import staleness

        conn = runtime.read_db()
        age, copied = staleness(conn)
        data = {
            "store": "postgresql",
            "url": redacted(runtime.store_url),
            "from": STORE_URL_ENV if os.environ.get(STORE_URL_ENV) else "shep settings store",
            "copy": runtime.db_file,
            "copied_events": copied,
            "copied_seconds_ago": None if age is None else round(age, 1),
        }
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(data).decode(), indent=2))
        return
    if data["store"] == "sqlite":
        click.echo(f"store: this home's own SQLite file {data['path']}")
        return
    click.echo(f"store: shared PostgreSQL {data['url']} (from {data['from']})")
    click.echo(f"copy: {data['copy']} ({counted(data['copied_events'], 'event')})")
