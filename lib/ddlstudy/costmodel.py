"""`python -m ddlstudy.costmodel` keeps working: the code lives in `ddlstudy.analysis.costmodel`
(`ddlstudy costmodel --help`).

Importing this module gives nothing: import `ddlstudy.analysis.costmodel` instead.
"""

if __name__ == "__main__":
    from ddlstudy.analysis.costmodel import main
    from ddlstudy.host import entry

    raise SystemExit(entry.run(main))
