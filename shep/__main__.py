"""``python -m shep`` runs the CLI."""

from shep.cli import main

main()
