"""`slipstream bench goodput`: goodput, attainment and accuracy against offered load, live."""
from __future__ import annotations

from pathlib import Path

import click

from slipstream.live_options import live_options


@click.command("goodput")
@live_options
@click.option("--knee", "knee_qps", default=70.0, show_default=True,
              help="The rate the sweep is scaled to: the highest Poisson rate that meets the SLO here.")
@click.option("--factors", default="0.5,1,1.5,2,3", show_default=True, help="Offered rates, as multiples of --knee.")
@click.option("--modes", default="milp+tuner,loki+tuner,cg-peak", show_default=True)
@click.option("--paths", default="kafka", show_default=True,
              help="kafka (produce to the input topic), gateway (HTTP through a gateway process), or both.")
@click.option("--arrivals", type=click.Choice(["poisson", "step"]), default="poisson", show_default=True,
              help="step: from half the knee to the offered rate a third of the way in.")
@click.option("--duration", "duration_s", default=60.0, show_default=True)
@click.option("--report", "report_dir", default="reports/goodput", show_default=True)
def goodput_bench(pipeline_file, plan_seconds, profiles_dir, activation_s, max_replicas, reserve_cores, request_cpu_ms, window_cpu_ms, replan_s, hop_ms,
            pace_ceiling, seed, calibrate, knee_qps, factors, modes, paths, arrivals, duration_s, report_dir) -> None:
    """Sweep the offered rate past capacity, to Kafka or through the gateway: a table and a PNG of goodput, attainment and
    accuracy against offered load, with the CPU each kind of process spent (needs the broker)."""
    from slipstream.loadgen.bench import goodput as bench_goodput
    from slipstream.loadgen.live.calibration import calibrated
    from slipstream.loadgen.live.prepare import prepare
    from slipstream.loadgen.live.run import LiveOptions, ensure_broker
    from slipstream.options import state_dir
    from slipstream.streams import broker

    plan_s = plan_seconds or duration_s / 3
    opts = LiveOptions(activation_s=activation_s, max_replicas=max_replicas, hop_ms=hop_ms, seed=seed,
                       reserve_cores=reserve_cores, request_cpu_ms=request_cpu_ms, window_cpu_ms=window_cpu_ms, replan_s=replan_s, pace_ceiling=pace_ceiling)
    started = ensure_broker(state_dir())
    try:
        pipe, store, _, _ = prepare(pipeline_file, bench_goodput.trace_for("poisson", knee_qps, knee_qps, duration_s),
                                    seed, profiles_dir, plan_s)
        store = calibrated(pipe, pipeline_file, store, calibrate, opts, Path(report_dir))
        rows = bench_goodput.sweep(pipe, pipeline_file, store, knee_qps=knee_qps,
                                   factors=[float(f) for f in factors.split(",")],
                                   modes=[m.strip() for m in modes.split(",") if m.strip()],
                                   paths=[p.strip() for p in paths.split(",") if p.strip()], arrivals=arrivals,
                                   duration_s=duration_s, plan_s=plan_s, seed=seed, report_dir=Path(report_dir),
                                   opts=opts, progress=click.echo)
        table = bench_goodput.format_rows(rows)
        click.echo("\n" + table)
        Path(report_dir).mkdir(parents=True, exist_ok=True)
        (Path(report_dir) / f"goodput-{arrivals}.txt").write_text(table + "\n")
        click.echo(f"plot: {bench_goodput.plot(rows, Path(report_dir) / f'goodput-{arrivals}.png')}")
    finally:
        if started:
            broker.down(broker.default_broker(root=state_dir()), progress=click.echo)

