"""The chapter registry: one `Chapter` record per notebook, the one place a chapter is declared.

Params (`report.chapters` and its default), the report's run order, the book's landing page
(summaries and headline figures), the claims (which tables they may read), resume (a chapter is
done only when every table it declares parses) and the README / docs chapter tables all derive
from these records. A leaf: it imports nothing but `ddlstudy.registry`, so any layer may read it;
summary functions are named as "module:attr" and imported on use.

Adding a chapter = its notebook + one `register_chapter(Chapter(...))` here (or in a plugin
module) + its docs example (docs/extending.md, checked by tests/test_registry.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ddlstudy.registry import LiveNames, Registry, resolve


@dataclass(frozen=True)
class Chapter:
    """One chapter: its notebook, what it reproduces, what it writes, how it is summarised.

    `tables`: table name -> the columns a reader (claims, summary, figures) relies on; every
    declared table must exist and carry those columns after the chapter ran (resume checks it).
    `optional_tables`: tables the chapter writes only under some settings (root, emulation,
    measured records to validate on): readers may name them, resume does not require them.
    `per_model`: the chapter runs once per model into `<name>-<model>` folders (chapter 03).
    `summary`: "module:attr" of `f(folder) -> str`. `headlines`: (caption, figure file
    patterns) for the landing page. `quick`: in `make report`'s default chapter list.
    """

    name: str
    title: str
    reproduces: str
    papers: tuple[str, ...]
    params_section: str | None = None
    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    optional_tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    summary: str | None = None
    headlines: tuple[tuple[str, tuple[str, ...]], ...] = ()
    per_model: bool = False
    quick: bool = True
    kind: str = "one host"

    @property
    def notebook(self) -> str:
        return f"{self.name}.ipynb"

    def folders(self, models: Sequence[str] = (), emulated_models: Sequence[str] = ()
                ) -> list[str]:
        """The run-folder names this chapter writes for the given models."""
        if not self.per_model:
            return [self.name]
        return ([f"{self.name}-{m}" for m in models]
                + [f"{self.name}-emulated-{m}" for m in emulated_models])

    def summarize(self, folder: Any) -> str | None:
        """The chapter's computed summary, or None when it declares no summary function."""
        return resolve(self.summary)(folder) if self.summary else None


CHAPTERS: Registry[Chapter] = Registry("chapter")
CHAPTER_NAMES = LiveNames(lambda: sorted(CHAPTERS))
QUICK_CHAPTERS = LiveNames(lambda: sorted(n for n, c in CHAPTERS.items() if c.quick))


def register_chapter(chapter: Chapter) -> Chapter:
    """Add a chapter; ValueError if its name is taken or does not start with two digits."""
    if not (chapter.name[:2].isdigit() and chapter.name[2:3] == "_"):
        raise ValueError(f"chapter name {chapter.name!r} must look like NN_title")
    return CHAPTERS.register(chapter)


def get_chapter(name: str) -> Chapter:
    """The chapter named `name` (a run folder such as `03_ps_vs_ring-emulated-resnet50` names
    its chapter too); ValueError with the known names otherwise."""
    base = name if name in CHAPTERS else name.split("-", 1)[0]
    if base not in CHAPTERS:
        raise ValueError(f"unknown chapter {name!r}; chapters: {', '.join(CHAPTER_NAMES)}")
    return CHAPTERS[base]


def table_known(chapter: str, table: str) -> bool:
    """True when `chapter` declares `table`, always written or optional (claims check the tables
    they read with this)."""
    c = get_chapter(chapter)
    return table in c.tables or table in c.optional_tables


def chapter_rows() -> list[dict[str, str]]:
    """One row per chapter, for the README / docs tables (generated, never written by hand)."""
    return [{"chapter": f"`{c.name}`", "what it shows": c.title, "reproduces": c.reproduces,
             "kind": c.kind, "in `make report`": "yes" if c.quick else "report-full"}
            for c in (CHAPTERS[n] for n in CHAPTER_NAMES)]


_S = "ddlstudy.chapters.summaries"
for _c in [
    Chapter("00_background", "mini-batch SGD, PS and ring step by step on in-process ranks, cost "
            "formulas with worked numbers, float32 summation-order drift",
            "Shi 2019; Fourie 2019 (cost formulas, bracketing)", ("Shi 2019", "Fourie 2019"),
            tables={"worked_costs": (), "traffic_demo": (), "bracketing_drift": ()},
            summary=f"{_S}:background", kind="analytic + in-process"),
    Chapter("01_cluster_setup", "the engines (ranks, hosts, devices); node-to-node latency and "
            "bandwidth vs message size", "Wang (NCHC) Fig. 2", ("Wang (NCHC)",),
            params_section="cluster", tables={"engines": (), "p2p": ()},
            summary=f"{_S}:cluster_setup"),
    Chapter("02_collectives", "every all-reduce algorithm vs message size, busbw, correctness, "
            "alpha-beta-gamma fit, which algorithm wins where", "Fourie 2019 Figs 9-15",
            ("Fourie 2019",), params_section="collectives",
            tables={"collectives": (), "collectives_summary": (), "best_algorithm": (),
                    "costmodel_errors": (), "p2p": ()},
            summary=f"{_S}:collectives",
            headlines=(("All-reduce time vs message size, every algorithm",
                        ("time_vs_size.png",)),)),
    Chapter("03_ps_vs_ring", "images/sec, speed-up and efficiency vs workers for PS and ring, per "
            "model; one host, and emulated links with compute replayed",
            "Shi 2019 Figs 4.1-4.4; Jiang 2020 (BytePS)", ("Shi 2019", "Jiang 2020"),
            params_section="training",
            tables={"summary": ("model", "strategy", "workers")},
            summary=f"{_S}:ps_vs_ring", per_model=True, kind="one host + emulated",
            headlines=(("Parameter Server vs ring all-reduce: images/sec vs workers",
                        ("throughput.png", "speedup.png")),)),
    Chapter("04_utilization_traffic", "CPU and traffic per node over time, packets per node, "
            "PS server bytes vs ring per-node bytes", "Shi 2019 Figs 4.5-4.22, 5.1",
            ("Shi 2019",), params_section="monitor",
            tables={"monitor": (), "summary": (), "traffic_per_step": (),
                    "traffic_per_repeat": ()},
            summary=f"{_S}:utilization_traffic",
            headlines=(("Traffic per node per step: the PS server vs a ring worker",
                        ("traffic_per_node.png",)),)),
    Chapter("05_network_profiles", "ResNet-50 ring all-reduce on IB-EDR-like vs 10GbE-like "
            "emulated links, scaling efficiency per profile", "Wang (NCHC) Fig. 5",
            ("Wang (NCHC)",), params_section="network",
            tables={"summary": ("profile", "workers"), "collectives_emulated": (),
                    "collectives_validation": ()},
            summary=f"{_S}:network_profiles", kind="emulated",
            headlines=(("Scaling efficiency per network profile",
                        ("efficiency_by_profile.png",)),)),
    Chapter("06_projection", "the step-time model validated on measured cells, then projected: "
            "Shi's grid, Wang's 8-64 GPUs, scaling to 1024 workers, what-ifs",
            "Shi 2019; Malik 2018; Wang (NCHC)", ("Shi 2019", "Malik 2018", "Wang (NCHC)"),
            params_section="projection",
            tables={"validation": (), "projection_shi": (), "projection_scaling": (),
                    "scaling_efficiency": (), "what_ifs": (), "regime_map": ()},
            optional_tables={"validation_error": (), "efficiency": ()},
            summary=f"{_S}:projection", kind="analytic (projected)",
            headlines=(("Projected scaling efficiency (step-time model)",
                        ("efficiency_by_profile.png", "scaling_to_1024.png")),)),
    Chapter("07_frameworks", "Horovod, TF parameter servers and TF MultiWorkerMirrored beside "
            "ddlstudy's PS, ring and torch DDP: images/sec, efficiency, bytes per node",
            "Wang (NCHC) Fig. 4; Malik 2018 (Horovod scaling)",
            ("Wang (NCHC)", "Malik 2018", "Shi 2019"),
            params_section="frameworks",
            tables={"summary": ("profile", "strategy", "workers"), "scaling": ()},
            summary=f"{_S}:frameworks", quick=False, kind="emulated"),
    Chapter("08_convergence", "test accuracy and loss per epoch for single, sync / async PS, "
            "ring and DDP; async staleness; accuracy per all-reduce algorithm",
            "Pani Figs 1-2, 4-5; Fourie 2019 Fig. 16", ("Pani", "Fourie 2019"),
            params_section="convergence",
            tables={"runs": (), "curves": (), "final": (), "gaps": (), "staleness": (),
                    "async_cost": (), "bracketing": ()},
            summary=f"{_S}:convergence", quick=False),
    Chapter("09_batch_size", "per-worker batch 32-8192 on 1 vs N workers: time per epoch, "
            "accuracy, linear LR scaling; Malik's 64-512 sweep on emulated links",
            "Pani Figs 3, 6; Malik 2018 (batch 64-512)", ("Pani", "Malik 2018"),
            params_section="batch_sweep", tables={"runs": (), "sweep": ()},
            optional_tables={"malik": ()},  # Malik 2018's sweep runs on emulated links (root)
            summary=f"{_S}:batch_size", quick=False),
    Chapter("10_faults", "a worker that dies mid-run: how each strategy recovers and what it "
            "loses", "beyond the papers", (), params_section="faults",
            tables={"runs": (), "costs": ("strategy", "recovery", "time_lost_s",
                                          "steps_redone")},
            summary=f"{_S}:faults", quick=False),
    Chapter("11_beyond", "ZeRO-1/2/3, FSDP and compressed all-reduce (fp16, PowerSGD, top-k) "
            "beside PS and ring: bytes per step per rank, images/sec, accuracy cost; one "
            "straggler, sync vs async: throughput and time to accuracy",
            "Rajbhandari 2020 (ZeRO) Sec. 7.2; Vogels 2019 (PowerSGD); Zhao 2023 (FSDP)",
            ("Rajbhandari 2020", "Vogels 2019", "Zhao 2023"), params_section="beyond",
            tables={"comparison": ("strategy", "repeat", "workers", "bytes_sent_per_step",
                                   "images_per_sec", "bytes_source"),
                    "bytes_ratio": ("strategy", "bytes_ratio", "runs"),
                    "stragglers": ("arm", "factor", "repeat", "images_per_sec_sustained"),
                    "straggler_slowdown": ("arm", "factor", "ratio")},
            optional_tables={"accuracy": (), "accuracy_cost": (),  # not when no strategies
                             "straggler_tta": (), "straggler_tta_ratio": (),
                             "regime_winners": ()},
            summary="ddlstudy.chapters.ch11_beyond:summary", quick=True, kind="emulated",
            headlines=(("Bytes per step per rank and images/sec relative to the ring",
                        ("beyond.png",)),)),
    Chapter("99_conclusions", "every claim of the five papers beside the quantity that tests "
            "it, with its interval and verdict", "all five papers",
            ("Shi 2019", "Fourie 2019", "Malik 2018", "Pani", "Wang (NCHC)"),
            tables={"claims": ("paper", "claim", "verdict")},
            summary=f"{_S}:conclusions", kind="verdicts"),
]:
    register_chapter(_c)
