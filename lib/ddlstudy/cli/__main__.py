"""`python -m ddlstudy.cli` = `ddlstudy`."""

from ddlstudy.cli import main
from ddlstudy.host import entry

raise SystemExit(entry.run(main))
