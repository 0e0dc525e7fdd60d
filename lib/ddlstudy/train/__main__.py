"""`python -m ddlstudy.train`: one training run on the cluster (see `ddlstudy train --help`)."""

# Import by name so engines unpickle ddlstudy functions, not copies from __main__.
from ddlstudy.cli.train import main
from ddlstudy.host import entry

raise SystemExit(entry.run(main))
