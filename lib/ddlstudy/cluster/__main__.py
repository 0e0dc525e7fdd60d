"""`python -m ddlstudy.cluster`: check or start the engines (see `ddlstudy cluster --help`)."""

# Import by name so engines unpickle ddlstudy.cluster.engines functions, not copies from __main__.
from ddlstudy.cluster.engines import main
from ddlstudy.host import entry

raise SystemExit(entry.run(main))
