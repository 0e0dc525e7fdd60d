"""`python -m ddlstudy.conclusions` keeps working: the code lives in `ddlstudy.claims.engine`
(`ddlstudy conclusions --help`).

Importing this module gives nothing: import `ddlstudy.claims.engine` instead.
"""

if __name__ == "__main__":
    from ddlstudy.claims.engine import main
    from ddlstudy.host import entry

    raise SystemExit(entry.run(main))
