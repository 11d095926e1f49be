"""`slipstream compare-live`: planner modes on the real broker at small scale, each a live run."""
from __future__ import annotations

from pathlib import Path

import click

from slipstream.loadgen.live.calibration import calibrated, refit
from slipstream.loadgen.live.prepare import prepare
from slipstream.loadgen.live.run import LiveOptions, ensure_broker, live_run
from slipstream.live_options import live_options
from slipstream.options import state_dir
from slipstream.streams import broker

COMPARE_TRACE = "step:rates=6/18/6,at=20/50,cv2=4,transition=5,duration=70"


@click.command("compare-live")
@live_options
@click.option("--trace", "spec", default=COMPARE_TRACE, show_default=True)
@click.option("--modes", default="milp+tuner,inferline+tuner,cg-peak,cg-mean", show_default=True)
@click.option("--report", "report_dir", default="reports/compare-live", show_default=True)
@click.option("--refit", "refit_after", is_flag=True,
              help="At the end, store a calibration fitted on every mode's run as one: the next run plans and "
                   "predicts with each variant these modes served measured.")
def compare_live(pipeline_file, plan_seconds, profiles_dir, activation_s, max_replicas, reserve_cores, request_cpu_ms, window_cpu_ms, replan_s,
                 hop_ms, pace_ceiling, seed, calibrate, spec, modes, report_dir, refit_after) -> None:
    """Planner modes on the real broker at small scale: cost, attainment, measured vs estimator p99."""
    from slipstream.loadgen.compare import compare_runs, failures, format_comparison
    from slipstream.loadgen.plots import plot_modes

    started = ensure_broker(state_dir())
    try:
        pipe, store, arrivals, sample = prepare(pipeline_file, spec, seed, profiles_dir, plan_seconds)
        store = calibrated(pipe, pipeline_file, store, calibrate,
                           LiveOptions(mode="milp", activation_s=activation_s, max_replicas=max_replicas, hop_ms=hop_ms,
                                       seed=seed, reserve_cores=reserve_cores, request_cpu_ms=request_cpu_ms, window_cpu_ms=window_cpu_ms, replan_s=replan_s), Path(report_dir))
        summaries = {}

        def runner(mode: str, tuned: bool):
            name = f"{mode}{'+tuner' if tuned else ''}"
            click.echo(f"\n== {name}")
            opts = LiveOptions(mode=mode, tune=tuned, activation_s=activation_s, max_replicas=max_replicas,
                               hop_ms=hop_ms, seed=seed, reserve_cores=reserve_cores, request_cpu_ms=request_cpu_ms, window_cpu_ms=window_cpu_ms,
                               replan_s=replan_s if tuned else 0.0, pace_ceiling=pace_ceiling)
            run = live_run(pipe, pipeline_file, arrivals, sample, store, Path(report_dir) / name, opts,
                           f"{pipe.name} {name} {spec}")
            summaries[name] = run.summary
            return run.summary, run.estimate

        rows = compare_runs([m.strip() for m in modes.split(",") if m.strip()], runner)
        click.echo("\n" + format_comparison(rows))
        Path(report_dir).mkdir(parents=True, exist_ok=True)
        (Path(report_dir) / "comparison.txt").write_text(format_comparison(rows) + "\n")
        if summaries:
            click.echo(f"modes over time: {plot_modes(summaries, Path(report_dir) / 'modes.png', spec)}")
        if refit_after and summaries:
            refit(pipe, store, [Path(report_dir) / name for name in summaries])
        if failures(rows):
            raise click.ClickException(f"mode(s) failed:\n{failures(rows)}")
    finally:
        if started:
            broker.down(broker.default_broker(root=state_dir()), progress=click.echo)


commands = [compare_live]
