"""`python -m evaledger …` runs the CLI."""

from evaledger.api.cli import main

raise SystemExit(main())
