"""``python -m shep.cli.docgen``: see the package's doc."""

from shep.cli.docgen.main import main

raise SystemExit(main())
