"""`slipstream bench planner`: MILP solve time, estimator speed, cost of each mode vs cg-peak."""
from __future__ import annotations

import json
from dataclasses import asdict

import click


@click.command("planner")
@click.option("--repeats", default=5, show_default=True, help="MILP solves per solver (median reported).")
@click.option("--sim-seconds", default=600.0, show_default=True, help="Seconds of 300 qps the estimator replays.")
@click.option("--plan-seconds", default=30.0, show_default=True, help="Length of the plan and eval traces.")
@click.option("--modes", default="milp,milp-top,loki,inferline,cg-peak,cg-mean", show_default=True)
@click.option("--json", "as_json", is_flag=True)
def planner_bench(repeats, sim_seconds, plan_seconds, modes, as_json) -> None:
    """MILP solve time (10x10x7x3), estimator requests/s, cost and attainment per mode."""
    from slipstream.loadgen.bench import planner as bench

    s = bench.BenchSettings(repeats=repeats, sim_seconds=sim_seconds, plan_seconds=plan_seconds,
                            modes=tuple(m.strip() for m in modes.split(",") if m.strip()))
    result = bench.run(s)
    if as_json:
        click.echo(json.dumps(asdict(result) | {"sim_qps": result.sim_qps}, indent=2, default=float))
    else:
        bench.render(result, s)


commands: list[click.Command] = []  # attached to `slipstream bench` by slipstream/commands/bench.py
