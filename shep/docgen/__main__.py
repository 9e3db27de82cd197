"""``python -m shep.docgen``: see the package's doc."""

from shep.docgen.main import main

raise SystemExit(main())
