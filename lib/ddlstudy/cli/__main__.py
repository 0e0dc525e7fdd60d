"""`python -m ddlstudy.cli` = `ddlstudy`."""

from ddlstudy.cli import main

raise SystemExit(main())
