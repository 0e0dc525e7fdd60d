"""`python -m ddlstudy.analysis.costmodel ...` (also `python -m ddlstudy.costmodel ...`)."""

from ddlstudy.analysis.costmodel.cli import main
from ddlstudy.host import entry

raise SystemExit(entry.run(main))
