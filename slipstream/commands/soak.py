"""`slipstream soak`: memory and lag over a long run (``slipstream.loadgen.faults.soak_run``)."""
from __future__ import annotations

import click

from slipstream.fault_options import fault_options


@click.command()
@fault_options
@click.option("--minutes", default=5.0, show_default=True)
@click.option("--rate", "rate_qps", default=4.0, show_default=True, help="Poisson arrival rate (requests/s).")
@click.option("--trace", default=None,
              help="A trace spec (docs/loadgen.md) in place of Poisson --rate for --minutes, e.g. a stepped "
                   "rate to find the stack's capacity.")
@click.option("--sample-s", default=5.0, show_default=True, help="Seconds between samples of RSS and lag.")
@click.option("--warmup-s", default=60.0, show_default=True, help="Left out of the growth verdict.")
@click.option("--report", "report_dir", default="reports/soak", show_default=True)
def soak(pipeline_file, brokers, profiles_dir, mode, replan_s, minutes, rate_qps, trace, sample_s, warmup_s,
         report_dir) -> None:
    """Replay Poisson load for --minutes and plot RSS per process, consumer lag and attainment over time."""
    from slipstream.loadgen.faults.soak_run import SoakOptions, run_soak

    run_soak(SoakOptions(pipeline_file, minutes, rate_qps, brokers, sample_s, warmup_s, 30.0, profiles_dir,
                         report_dir, mode, replan_s, trace=trace))


commands = [soak]
