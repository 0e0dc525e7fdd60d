"""`python -m ddlstudy <command>` = `ddlstudy <command>`."""

from ddlstudy.cli import main

raise SystemExit(main())
