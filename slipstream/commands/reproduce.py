"""`slipstream reproduce PAPER|all`: the papers' headline experiments in the simulator."""
from __future__ import annotations

from pathlib import Path

import click

from slipstream.streams.config import RESEARCH_DATA_ENV

RESEARCH_DATA = Path(__file__).resolve().parents[3] / "shared" / "research-data"


@click.command("reproduce")
@click.argument("paper", type=click.Choice(["inferline", "loki", "ipa", "clockwork", "infaas", "all"]))
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=RESEARCH_DATA,
              envvar=RESEARCH_DATA_ENV, show_envvar=True, show_default=True,
              help="The published traces and profiles (read where they lie, never copied).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("reports/reproduce"),
              show_default=True, help="Where each paper's table (PAPER.md) and plots go.")
def reproduce_cmd(paper: str, data_dir: Path, out: Path) -> None:
    """Re-run a paper's headline experiment; print the paper's numbers beside ours."""
    from slipstream.loadgen.reproduce import PAPERS, reproduce

    data = data_dir if data_dir.is_dir() else None
    for name in PAPERS if paper == "all" else (paper,):
        result = reproduce(name, data, out, progress=lambda msg: click.echo(f"[{name}] {msg}", err=True))
        click.echo(result.markdown())


commands = [reproduce_cmd]
