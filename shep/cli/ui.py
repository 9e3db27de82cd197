"""``shep ui``: the dashboard in a browser, served by shep itself (``shep.web``)."""

from __future__ import annotations

import click

from shep.home.runtime import Runtime


@click.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=4050,
    show_default=True,
    help="Port to listen on (0: any free one).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Another than this machine's loopback lets others reach "
    "the dashboard (with the token): prefer an SSH tunnel.",
)
@click.option("--no-open", is_flag=True, help="Do not open a browser.")
@click.option(
    "--read-only", is_flag=True, help="Show everything, decide nothing: no action on any page."
)
@click.pass_obj
def ui(runtime: Runtime, port: int, host: str, no_open: bool, read_only: bool) -> None:
    """Serve a live dashboard of this home: runs, the inbox, features, replay, audit.

    Prints the address to open; it carries a random token, which the browser
    keeps as a cookie: a request without it is refused. Pages change as the
    log grows, without reload. Everything is served by shep itself; nothing is
    fetched from the internet. Stop it with Ctrl-C.
    """
    from events.display import printable
    from shep.web.server import Served, serve

    def ready(served: Served) -> None:
        if not served.loopback:
            click.echo(
                f"shep: warning: listening on {host}: anyone who reaches this machine and "
                "has the token can see every run (and decide, unless --read-only).",
                err=True,
            )
        if runtime.store_url is not None:
            from events.postgres_url import redacted

            where = f"the shared store {redacted(runtime.store_url)}"
        else:
            where = runtime.db_file
        click.echo(printable(f"Serving {where} at {served.url}"))
        click.echo("Stop with Ctrl-C.", err=True)
        if not no_open:
            import threading
            import webbrowser

            threading.Thread(target=webbrowser.open, args=(served.url,), daemon=True).start()

    serve(
        host=host,
        port=port,
        read_only=read_only,
        db_file=runtime.db_file,
        store_url=runtime.store_url,
        new_runtime=lambda: Runtime.from_environment(debug=runtime.debug, say=runtime.say),
        on_ready=ready,
        debug=runtime.debug,
    )
    click.echo("Stopped.", err=True)
