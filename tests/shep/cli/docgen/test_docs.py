"""Docs execute: the CLI reference and the event catalog are generated and kept current."""

from __future__ import annotations

from shep.cli.docgen import DOCS, GENERATED, command_paths


def test_generated_docs_are_current() -> None:
    """docs/cli.md and docs/events.md equal what `python -m shep.cli.docgen` writes."""
    for name, render in GENERATED.items():
        assert (DOCS / name).read_text() == render(), (
            f"{name} is stale: run python -m shep.cli.docgen"
        )


def test_every_command_is_documented() -> None:
    """Each command a user can type has its own section in docs/cli.md."""
    text = (DOCS / "cli.md").read_text()
    paths = command_paths()
    assert {"status", "logs", "projections rebuild", "audit verify"} <= set(paths)
    missing = [p for p in paths if f"## `shep {p}`" not in text]
    assert missing == []


def test_every_event_is_in_the_catalog() -> None:
    """Each event class appears in docs/events.md with its topic."""
    from events.catalog import EVENT_CLASSES

    text = (DOCS / "events.md").read_text()
    assert [t for t in EVENT_CLASSES if f"Topic: `{t}`" not in text] == []
