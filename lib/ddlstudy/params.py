"""`python -m ddlstudy.params` keeps working: the code lives in `ddlstudy.config.params` (`ddlstudy
params --help`).

Importing this module gives nothing: import `ddlstudy.config.params` instead.
"""

if __name__ == "__main__":
    from ddlstudy.config.params import main
    from ddlstudy.host import entry

    raise SystemExit(entry.run(main))
