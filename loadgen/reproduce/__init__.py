"""Each paper's headline experiment, re-run in the simulator on the published data.

One module per paper (``inferline``, ``loki``, ``ipa``, ``clockwork``, ``infaas``), each exposing
``run(data_dir: Path | None, out_dir: Path, progress: Callable[[str], None]) -> Reproduction``.
A module whose data is absent returns a ``Reproduction`` with ``skipped`` set, never raises.
``slipstream reproduce PAPER|all`` runs them and writes ``OUT/PAPER.md`` (the rows as a table) and
the module's PNG plots beside it; docs/reproductions.md collects the tables.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

PAPERS = ("inferline", "loki", "ipa", "clockwork", "infaas")
# The published files the experiments read, under the research-data directory (its README gives
# each one's provenance and licence); read where they lie, never copied.
PROFILES = "UMass-LIDS+Loki/aggregate_profiled.csv"
TWITTER = "reconfigurable-ml-pipeline+ipa/twitter_workload_per_second.tbz2"


def missing(data_dir: Path | None, *files: str) -> str:
    """Why an experiment cannot run ("" when every file is under ``data_dir``)."""
    if data_dir is None:
        return "no research-data directory"
    absent = [f for f in files if not (data_dir / f).exists()]
    return f"{data_dir}: missing {', '.join(absent)}" if absent else ""


@dataclass(frozen=True)
class Row:
    """One headline figure: the paper's value beside ours on the same axis."""

    figure: str      # the paper's figure or table, e.g. "Fig. 6"
    metric: str      # what is compared, e.g. "cost vs CG-Peak at 150 qps, CV^2=4"
    paper: str       # the paper's number as printed, e.g. "7.6x lower"
    ours: str        # ours, same unit
    note: str = ""   # when ours differs by more than 2x: why (hardware, profiles, trace)


@dataclass
class Reproduction:
    paper: str
    rows: list[Row] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    skipped: str = ""  # why the experiment could not run (data absent), empty when it ran

    def markdown(self) -> str:
        head = f"## {self.paper}\n\n"
        if self.skipped:
            return head + f"skipped: {self.skipped}\n"
        lines = ["| figure | metric | paper | ours | note |", "|---|---|---|---|---|"]
        lines += [f"| {r.figure} | {r.metric} | {r.paper} | {r.ours} | {r.note} |" for r in self.rows]
        plots = "".join(f"\n![{p.stem}]({p.name})" for p in self.plots)
        return head + "\n".join(lines) + "\n" + plots + "\n"


def reproduce(paper: str, data_dir: Path | None, out_dir: Path, progress=print) -> Reproduction:
    """Run one paper's experiment and write its table; the module is imported only when asked for."""
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; one of {', '.join(PAPERS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    result = importlib.import_module(f"slipstream.loadgen.reproduce.{paper}").run(data_dir, out_dir, progress)
    (out_dir / f"{paper}.md").write_text(result.markdown())
    return result
