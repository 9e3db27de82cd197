"""docs/cli.md from ``--help`` and docs/events.md from the event catalog (whole files)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import msgspec


def _clone() -> Path:
    """The clone this module is in: the nearest directory above with pyproject.toml and docs/."""
    here = Path(__file__).resolve()
    return next(
        (p for p in here.parents if (p / "pyproject.toml").is_file() and (p / "docs").is_dir()),
        here.parents[3],
    )


#: The clone the generators run from, and its docs/ (where they write).
CLONE = _clone()
DOCS = CLONE / "docs"


def _walk(
    command: click.Command, path: list[str], ctx: click.Context
) -> Iterator[tuple[list[str], click.Command, click.Context]]:
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                sub_ctx = click.Context(sub, info_name=name, parent=ctx)
                yield from _walk(sub, [*path, name], sub_ctx)


def command_paths() -> list[str]:
    """Every command, as the words a user types after ``shep``."""
    from shep.cli import cli

    root = click.Context(cli, info_name="shep", help_option_names=["-h", "--help"])
    return [" ".join(p) for p, _, _ in _walk(cli, [], root) if p]


def cli_reference() -> str:
    """Markdown with the ``--help`` of every command."""
    from shep.cli import cli

    # The help option names the CLI really has (its context_settings): click caches each
    # command's help option the first time it is asked for, so a context without them
    # would render differently depending on what ran before in the same process.
    root = click.Context(
        cli,
        info_name="shep",
        terminal_width=100,
        max_content_width=100,
        help_option_names=["-h", "--help"],
    )
    parts = [
        "# CLI reference",
        "",
        "Generated from `--help` by `python -m shep.cli.docgen`; do not edit by hand.",
        "",
    ]
    for path, command, ctx in _walk(cli, [], root):
        ctx.terminal_width = ctx.max_content_width = 100
        title = " ".join(["shep", *path])
        parts += [f"## `{title}`", "", "```text", command.get_help(ctx).rstrip(), "```", ""]
    return "\n".join(parts)


def _type_name(annotation: object) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "").replace("uuid.", "").replace(
        "datetime.", ""
    )


def event_catalog() -> str:
    """Markdown listing every event, by stream kind, with its fields and types."""
    from events.catalog import EVENT_CLASSES

    parts = [
        "# Event catalog",
        "",
        "Generated from the code by `python -m shep.cli.docgen`; do not edit by hand.",
        "",
        "Every event also carries `originator_id` (the stream, a UUID), `originator_version`",
        "(its position in the stream, from 1) and `timestamp` (UTC). Stored events carry",
        "their global position and `chain_hash = H(previous hash, event)` as well.",
        "",
        "Each event type has a version. A type's stored form from version 2 on starts with",
        '`"class_version": N`; older forms are upcast when read (the upcasters are listed',
        "under their type) and the log is never rewritten. A store holding a type, or a",
        "version of one, that this shep does not know is refused: upgrade shep.",
        "",
    ]
    current_module = ""
    for topic, cls in EVENT_CLASSES.items():
        module = topic.split(":")[0]
        if module != current_module:
            current_module = module
            doc = (sys.modules[module].__doc__ or "").strip().splitlines()[0]
            parts += [f"## `{module}`", "", doc, ""]
        parts += [
            f"### {cls.__name__}",
            "",
            inspect.cleandoc(cls.__doc__ or ""),
            "",
            f"Topic: `{topic}` (version {cls.class_version})",
            "",
        ]
        for older in range(1, cls.class_version):
            upcaster = getattr(cls, f"upcast_v{older}_v{older + 1}")
            summary = inspect.cleandoc(upcaster.__doc__ or "").split("\n\n")[0]
            parts += [f"From version {older}: {summary}".rstrip(), ""]
        fields = [
            f
            for f in msgspec.structs.fields(cls)
            if f.name not in ("originator_id", "originator_version", "timestamp")
        ]
        if fields:
            parts += ["| field | type | default |", "|---|---|---|"]
            for f in fields:
                if f.required:
                    default = "required"
                elif f.default is not msgspec.NODEFAULT:
                    default = f"`{f.default!r}`"
                else:
                    default = f"`{f.default_factory()!r}`"
                type_name = _type_name(f.type).replace("|", "\\|")
                parts.append(f"| `{f.name}` | `{type_name}` | {default} |")
            parts.append("")
    return "\n".join(parts)


#: The pages generated whole, by name under docs/, and what renders each.
GENERATED = {"cli.md": cli_reference, "events.md": event_catalog}
