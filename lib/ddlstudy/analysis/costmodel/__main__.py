"""`python -m ddlstudy.analysis.costmodel ...` (also `python -m ddlstudy.costmodel ...`)."""

import sys

from ddlstudy.analysis.costmodel.cli import main

sys.exit(main())
