"""The generated parts of the docs: whole reference pages, and the output shown on the others.

python -m shep.cli.docgen                   # rewrite cli.md, events.md, every output block
python -m shep.cli.docgen --check           # exit 1 naming each page and block that is stale
python -m shep.cli.docgen questions teams   # the reference pages and these scenarios only
python -m shep.cli.docgen --reference       # cli.md and events.md only (no scenario is played)

docs/cli.md comes from ``--help`` and docs/events.md from the event catalog
(``reference.py``). The other pages keep their prose, and their marked
console blocks are the output of real runs (``pages.py``): see "How the pages
with output are made" in docs/architecture.md.
"""

from shep.cli.docgen.reference import DOCS, GENERATED, cli_reference, command_paths, event_catalog

__all__ = ["DOCS", "GENERATED", "cli_reference", "command_paths", "event_catalog"]
