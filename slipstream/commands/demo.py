"""`slipstream demo`: the main job.

`demo`, end to end on this machine:
1. start the local Kafka broker (unless ``SLIPSTREAM_BOOTSTRAP`` names one) and create the topics;
2. profile the example pipeline's real variants (cached in the profile store) and, when no
   calibration is in force, calibrate: a 60 s live run whose hop timings fit service scale, core
   sharing and Kafka transits (``slipstream calibrate``);
3. plan it for its SLO from the quiet first phase of the trace (milp by default), check the plan with
   the estimator, and publish one StageConfig per stage to the control topic;
4. start the planned workers as local processes with the tuner on top;
5. replay a bursty trace open-loop (the rate triples in the middle: the tuner has to react);
6. print the report, the estimator on the run's own arrivals beside it, and the plot paths; refit the
   calibration from this run (the next run plans with it); shut everything down (also on Ctrl-C).
"""
from __future__ import annotations

from pathlib import Path

import click

from slipstream.loadgen.compare import ModeNotApplicable
from slipstream.loadgen.live.calibration import calibrated, refit
from slipstream.loadgen.live.prepare import prepare
from slipstream.loadgen.live.run import LiveOptions, ensure_broker, live_run
from slipstream.loadgen.replay_estimate import format_like_for_like
from slipstream.planner.modes import MODES
from slipstream.live_options import live_options
from slipstream.options import state_dir
from slipstream.streams import broker

# the planner plans from the quiet phase before the first step (--plan-seconds); the low tail is long
# enough for the tuner to scale back down: the longest envelope window (the 45 s planning sample)
# must forget the step, then the 30 s scale-down horizon pass
DEFAULT_TRACE = "step:rates=6/18/6,at=45/105,cv2=4,transition=5,duration=240"


@click.command()
@live_options
@click.option("--trace", "spec", default=DEFAULT_TRACE, show_default=True, help="Trace spec (docs/loadgen.md).")
@click.option("--mode", type=click.Choice(MODES), default="milp",
              show_default=True)
@click.option("--report", "report_dir", default="reports/demo", show_default=True)
def demo(pipeline_file, plan_seconds, profiles_dir, activation_s, max_replicas, reserve_cores, request_cpu_ms, window_cpu_ms, replan_s, hop_ms,
         pace_ceiling, seed, calibrate, spec, mode, report_dir) -> None:
    """Run the example pipeline end to end: broker, profile, calibrate, plan, workers + tuner, replay, report."""
    started = ensure_broker(state_dir())
    try:
        pipe, store, arrivals, sample = prepare(pipeline_file, spec, seed, profiles_dir, plan_seconds)
        opts = LiveOptions(mode=mode, activation_s=activation_s, max_replicas=max_replicas, hop_ms=hop_ms, seed=seed,
                           reserve_cores=reserve_cores, request_cpu_ms=request_cpu_ms, window_cpu_ms=window_cpu_ms, replan_s=replan_s, pace_ceiling=pace_ceiling)
        store = calibrated(pipe, pipeline_file, store, calibrate, opts, Path(report_dir))
        run = live_run(pipe, pipeline_file, arrivals, sample, store,
                       Path(report_dir), opts, f"demo: {pipe.name}, {mode} + tuner, {spec}")
        plan, summary = run.plan, run.summary
        click.echo(f"\nplan ({mode}): planner's estimate for its sample: p99 {plan.p99_text()} at "
                   f"{plan.rate_qps:.1f} qps")
        click.echo("the estimator on this run's own arrivals, replica changes, re-plans and each model's measured "
                   "pace (and with the pace drawn from the calibration), against the measured run:")
        click.echo(format_like_for_like(run.estimate))
        refit(pipe, store, Path(report_dir))
        click.echo(f"report and plots in {report_dir}/ (summary.txt, summary.json, *.png); "
                   f"worker logs in {report_dir}/workers/")
    except ModeNotApplicable as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:  # Ctrl-C: live_run's finally has stopped workers and tuner
        click.echo("interrupted: shutting down", err=True)
    finally:
        if started:
            broker.down(broker.default_broker(root=state_dir()), progress=click.echo)


commands = [demo]
