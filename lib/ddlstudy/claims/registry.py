"""The claim registry: every claim of every paper, by id, in one place.

Each paper's file (`claims/<paper>.py`) holds its `Claim` records and registers them; the
registry loads those files as plugins on its first read (so it imports none of them itself), and
a claim registered later (a notebook, a test, docs/extending.md's example) is judged like the
built-ins. The engine (`ddlstudy.claims.engine`) evaluates whatever is registered.
"""

from __future__ import annotations

import sys

from ddlstudy.claims.base import Claim
from ddlstudy.registry import Registry

PAPER_FILES = ("ddlstudy.claims.shi2019", "ddlstudy.claims.fourie2019",
               "ddlstudy.claims.malik2018", "ddlstudy.claims.pani", "ddlstudy.claims.wang_nchc",
               "ddlstudy.claims.beyond", "ddlstudy.claims.jiang2020", "ddlstudy.claims.zhao2023")
CLAIMS: Registry[Claim] = Registry("claim", plugins=PAPER_FILES)
_ORIGIN: dict[str, str] = {}  # claim id -> the module that registered it


def register_claim(claim: Claim) -> Claim:
    """Add a claim; ValueError if its id is taken or a table it reads is not declared by its
    chapter (ddlstudy.chapters.registry)."""
    from ddlstudy.chapters.registry import get_chapter, table_known

    for chapter, table in claim.reads:
        c = get_chapter(chapter)  # ValueError naming the known chapters
        if not table_known(chapter, table):
            declared = ", ".join([*c.tables, *c.optional_tables])
            raise ValueError(f"claim {claim.id}: chapter {chapter} declares no table {table!r} "
                             f"(declared: {declared})")
    registered = CLAIMS.register(claim)
    _ORIGIN[claim.id] = sys._getframe(1).f_globals.get("__name__", "")
    return registered


def all_claims() -> list[Claim]:
    """Every registered claim: the papers' files in PAPER_FILES order (whatever order they were
    imported in: a test or notebook importing one paper first must not reorder chapter 99 or the
    README), each file's claims in its own order, then claims registered elsewhere."""
    rank = {module: i for i, module in enumerate(PAPER_FILES)}
    return sorted(CLAIMS.values(),
                  key=lambda c: rank.get(_ORIGIN.get(c.id, ""), len(PAPER_FILES)))
