"""`python -m ddlstudy.replay` keeps working: the code lives in `ddlstudy.workload.replay`
(`ddlstudy replay --help`).

Importing this module gives nothing: import `ddlstudy.workload.replay` instead.
"""

if __name__ == "__main__":
    from ddlstudy.host import entry
    from ddlstudy.workload.replay import main

    raise SystemExit(entry.run(main))
