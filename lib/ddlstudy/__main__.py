"""`python -m ddlstudy <command>` = `ddlstudy <command>`."""

from ddlstudy.cli import main
from ddlstudy.host import entry

raise SystemExit(entry.run(main))
