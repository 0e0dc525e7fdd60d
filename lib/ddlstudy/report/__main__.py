"""`python -m ddlstudy.report`: run the chapters and render the book (see `ddlstudy report
--help`)."""

from ddlstudy.host import entry
from ddlstudy.report.runner import main

raise SystemExit(entry.run(main))
