"""`python -m ddlstudy.netem` keeps working: the code lives in `ddlstudy.network.emulated.measure`
(`ddlstudy netem --help`).

Importing this module gives nothing: import `ddlstudy.network.emulated.netem` instead.
"""

if __name__ == "__main__":
    from ddlstudy.host import entry
    from ddlstudy.network.emulated.measure import main

    raise SystemExit(entry.run(main))
