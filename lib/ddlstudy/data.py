"""`python -m ddlstudy.data` keeps working: the code lives in `ddlstudy.workload.data` (`ddlstudy
data --help`).

Importing this module gives nothing: import `ddlstudy.workload.data` instead.
"""

if __name__ == "__main__":
    from ddlstudy.host import entry
    from ddlstudy.workload.data import main

    raise SystemExit(entry.run(main))
