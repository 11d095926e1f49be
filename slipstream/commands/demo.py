"""`slipstream demo` (the main job) and `slipstream compare-live` (planner modes on the real broker).

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

from slipstream.options import state_default, state_dir

from loadgen.compare import ModeNotApplicable
from loadgen.replay_estimate import format_like_for_like
from loadgen.traces import first_step_s
from slipstream.live import LiveOptions, ensure_broker, live_run, profile_missing
from streams import broker

# the planner plans from the quiet phase before the first step (--plan-seconds); the low tail is long
# enough for the tuner to scale back down: the longest envelope window (the 45 s planning sample)
# must forget the step, then the 30 s scale-down horizon pass
DEFAULT_TRACE = "step:rates=6/18/6,at=45/105,cv2=4,transition=5,duration=240"
COMPARE_TRACE = "step:rates=6/18/6,at=20/50,cv2=4,transition=5,duration=70"
CALIBRATION_TRACE = "step:rates=6/18/6,at=20/40,cv2=4,transition=5,duration=60"

common = [
    click.option("--pipeline", "pipeline_file", default="deploy/pipelines/image-classify.yaml", show_default=True,
                 type=click.Path(exists=True, dir_okay=False)),
    click.option("--plan-seconds", default=None, type=float,
                 help="The planner plans from this first part of the trace, the quiet phase before the "
                      "step (the tuner handles the rest) [default: a step trace's first at=; other "
                      "traces need it]."),
    click.option("--profiles", "profiles_dir", default=state_default("profiles"), show_default="STATE_DIR/profiles"),
    click.option("--activation-s", default=1.0, show_default=True,
                 help="Replica activation time for the tuner and estimator: a new model instance loads and "
                      "warms beside serving (slipstream bench scaling); scale-down waits 3x it."),
    click.option("--max-replicas", default=2, show_default=True,
                 help="Per stage; also capped by this host's cores less --reserve-cores."),
    click.option("--reserve-cores", default=0.5, show_default=True,
                 help="Cores kept for the broker, load generator and control plane."),
    click.option("--replan-s", default=30.0, show_default=True,
                 help="The planner service re-plans from live arrivals this often during the run (0: never)."),
    click.option("--hop-ms", default=6.0, show_default=True,
                 help="Kafka transit from one stage to the next (produce to consume) that the estimator "
                      "adds; the default is above the p99 of one transit that `slipstream bench dataplane` "
                      "measured on the 2-core VM (its 'last transit to client' row: p50 2.5 ms, p99 5.4 ms)."),
    click.option("--seed", default=0, show_default=True),
    click.option("--calibrate", "calibrate", type=click.Choice(["auto", "always", "never"]), default="auto",
                 show_default=True, help="auto: a calibration run first when the profile store has no "
                 "calibration in force; always: one first in any case; never: plan with what is in force."),
]


def _with(fn):
    for opt in reversed(common):
        fn = opt(fn)
    return fn


def calibrated(pipe, pipeline_file: str, store, when: str, opts: LiveOptions, report_dir: Path):
    """The profile store with a calibration in force: a short live run fitted first when ``when`` says
    (``always``, or ``auto`` and none in force)."""
    from planner.calibrate import summary_lines
    from planner.profiles import ProfileStore
    from slipstream.commands.calibrate import fit_report
    from slipstream.commands.loadgen import _trace

    if when == "never" or (when == "auto" and store.calibration):
        if store.calibration:
            click.echo(f"calibration: v{store.calibration['version']} (from {store.calibration.get('source')})")
        return store
    click.echo(f"calibration run ({CALIBRATION_TRACE}): measures service, core sharing and Kafka transits here")
    arrivals = _trace(CALIBRATION_TRACE, opts.seed)
    live_run(pipe, pipeline_file, arrivals, arrivals[arrivals < first_step_s(CALIBRATION_TRACE)], store,
             report_dir / "calibration", opts, f"calibration: {pipe.name}, {opts.mode}, {CALIBRATION_TRACE}")
    for line in summary_lines(fit_report(report_dir / "calibration", pipe, store.root)):
        click.echo(line)
    return ProfileStore(store.root)


def refit(pipe, store, report_dir: Path) -> None:
    """Store a calibration fitted on this run: the next run plans with it."""
    from planner.calibrate import CalibrationFitError
    from slipstream.commands.calibrate import fit_report

    try:
        doc = fit_report(report_dir, pipe, store.root)
    except CalibrationFitError as exc:
        click.echo(f"calibration not refitted: {exc}")
        return
    h = doc.get("host")
    click.echo(f"calibration v{doc['version']} fitted on this run (the next run plans with it): service x"
               + ", x".join(f"{v['scale']:.2f} {k}" for k, v in doc["service"].items())
               + (f"; batches share {h['free_cores']:.2f} cores" if h else ""))


def _setup(pipeline_file: str, spec: str, seed: int, profiles_dir: str, plan_seconds: float | None):
    """The pipeline, its profiles, the trace and the planning sample (its first ``plan_seconds``)."""
    from planner.profiles import ProfileStore
    from slipstream.commands.loadgen import _trace
    from streams.spec import load_pipeline

    arrivals = _trace(spec, seed)
    plan_s = plan_seconds or first_step_s(spec)
    if plan_s is None:
        raise click.UsageError(f"--plan-seconds: trace {spec!r} has no step to plan before; say how much to plan on")
    pipe = load_pipeline(pipeline_file)
    store = ProfileStore(profiles_dir)
    profile_missing(pipe, store)
    return pipe, store, arrivals, arrivals[arrivals < plan_s]


@click.command()
@_with
@click.option("--trace", "spec", default=DEFAULT_TRACE, show_default=True, help="Trace spec (docs/loadgen.md).")
@click.option("--mode", type=click.Choice(["milp", "inferline", "loki", "cg-mean", "cg-peak"]), default="milp",
              show_default=True)
@click.option("--report", "report_dir", default="reports/demo", show_default=True)
def demo(pipeline_file, plan_seconds, profiles_dir, activation_s, max_replicas, reserve_cores, replan_s, hop_ms,
         seed, calibrate, spec, mode, report_dir) -> None:
    """Run the example pipeline end to end: broker, profile, calibrate, plan, workers + tuner, replay, report."""
    started = ensure_broker()
    try:
        pipe, store, arrivals, sample = _setup(pipeline_file, spec, seed, profiles_dir, plan_seconds)
        opts = LiveOptions(mode, True, activation_s, max_replicas, hop_ms, seed, reserve_cores, replan_s)
        store = calibrated(pipe, pipeline_file, store, calibrate, opts, Path(report_dir))
        run = live_run(pipe, pipeline_file, arrivals, sample, store,
                       Path(report_dir), opts, f"demo: {pipe.name}, {mode} + tuner, {spec}")
        plan, summary = run.plan, run.summary
        click.echo(f"\nplan ({mode}): planner's estimate for its sample: p99 {plan.predicted_p99_ms:.1f} ms at "
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


@click.command("compare-live")
@_with
@click.option("--trace", "spec", default=COMPARE_TRACE, show_default=True)
@click.option("--modes", default="milp+tuner,inferline+tuner,cg-peak,cg-mean", show_default=True)
@click.option("--report", "report_dir", default="reports/compare-live", show_default=True)
def compare_live(pipeline_file, plan_seconds, profiles_dir, activation_s, max_replicas, reserve_cores, replan_s,
                 hop_ms, seed, calibrate, spec, modes, report_dir) -> None:
    """Planner modes on the real broker at small scale: cost, attainment, measured vs estimator p99."""
    from loadgen.compare import compare_runs, failures, format_comparison
    from loadgen.plots import plot_modes

    started = ensure_broker()
    try:
        pipe, store, arrivals, sample = _setup(pipeline_file, spec, seed, profiles_dir, plan_seconds)
        store = calibrated(pipe, pipeline_file, store, calibrate,
                           LiveOptions("milp", True, activation_s, max_replicas, hop_ms, seed, reserve_cores,
                                       replan_s), Path(report_dir))

        summaries = {}

        def runner(mode: str, tuned: bool):
            name = f"{mode}{'+tuner' if tuned else ''}"
            click.echo(f"\n== {name}")
            opts = LiveOptions(mode, tuned, activation_s, max_replicas, hop_ms, seed, reserve_cores,
                               replan_s if tuned else 0.0)
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
        if failures(rows):
            raise click.ClickException(f"mode(s) failed:\n{failures(rows)}")
    finally:
        if started:
            broker.down(broker.default_broker(root=state_dir()), progress=click.echo)


commands = [demo, compare_live]
