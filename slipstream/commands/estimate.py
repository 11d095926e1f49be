"""`slipstream estimate --report DIR [...]`: the estimator on finished live runs, like for like
(``slipstream.loadgen.live.run.like_for_like``), with the calibration in force or one fitted on other runs."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from slipstream.live_options import request_cpu_ms_option, window_cpu_ms_option
from slipstream.options import state_default


@click.command("estimate")
@click.option("--report", "report_dirs", required=True, multiple=True, type=click.Path(exists=True, file_okay=False),
              help="A finished live run's report folder (results.jsonl, plan.json, summary.json); repeatable.")
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--profiles", "profiles_dir", default=state_default("profiles"), show_default="STATE_DIR/profiles", type=click.Path(file_okay=False))
@click.option("--fit", "fit_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Estimate with a calibration fitted on these reports (in memory, not stored) instead of the one "
                   "in force: fit on some runs, check on others.")
@click.option("--activation-s", type=float, default=None, show_default="LiveOptions.activation_s",
              help="As the live runs had it.")
@request_cpu_ms_option
@window_cpu_ms_option
@click.option("--seed", default=0, show_default=True)
@click.option("--detail", is_flag=True, help="Also each run's per-stage table (residence, hop components).")
def estimate_cmd(report_dirs, pipeline_file, profiles_dir, fit_dirs, activation_s, request_cpu_ms, window_cpu_ms, seed, detail) -> None:
    """The estimator on finished live runs, like for like: each run's own arrivals, replica changes,
    re-plans, plan and each model's measured pace (est. p99; drawn p99: the pace drawn from the
    calibration instead), with the calibration in force ($SLIPSTREAM_CALIBRATION) or one fitted with --fit."""
    from slipstream.loadgen.compare import est_ratio
    from slipstream.loadgen.live.calibration import fit_report
    from slipstream.loadgen.replay_estimate import format_like_for_like
    from slipstream.loadgen.run_record import RunRecord
    from slipstream.planner.calibrate import recalibrated
    from slipstream.loadgen.live.run import LiveOptions, like_for_like, local_problem
    from slipstream.streams.profile_store import ProfileStore
    from slipstream.streams.spec import load_pipeline

    pipe, store = load_pipeline(pipeline_file), ProfileStore(profiles_dir)
    doc = fit_report(list(fit_dirs), pipe, profiles_dir, store=False) if fit_dirs else store.calibration
    click.echo(f"calibration: {_named(doc)}")
    opts = LiveOptions(seed=seed, request_cpu_ms=request_cpu_ms, window_cpu_ms=window_cpu_ms)
    if activation_s is not None:
        opts = replace(opts, activation_s=activation_s)
    click.echo(f"{'report':<40}{'p99 ms':>9}{'est. p99':>10}{'est/meas':>9}{'seeds ms':>12}{'SLO met':>9}{'est. SLO':>9}"
               f"{'drawn p99':>10}{'drawn/meas':>11}{'drawn SLO':>10}")
    for rep in map(Path, report_dirs):
        run = RunRecord(rep)
        summary, plan = run.summary(), run.plan()
        problem = local_problem(pipe, store, opts, rate_qps=max(plan.rate_qps, 1.0),  # the run's arrivals replace it
                                cores=None)  # the run's plan may name hardware wider than this host
        if fit_dirs:
            problem = recalibrated(problem, doc, store.calibration)
        est = like_for_like(problem, plan, summary, rep, opts, forward=False,  # the planning sample is not stored
                            calibration=doc)
        seeds = f"{min(est.seed_p99_ms):.0f}-{max(est.seed_p99_ms):.0f}"
        click.echo(f"{str(rep):<40}{est.measured_p99_ms:>9.1f}{est.estimated_p99_ms:>10.1f}"
                   f"{est_ratio(est.estimated_p99_ms, est.measured_p99_ms):>9}{seeds:>12}"
                   f"{100 * est.measured_attainment:>8.2f}%{100 * est.estimated_attainment:>8.2f}%"
                   f"{est.drawn_p99_ms:>10.1f}{est_ratio(est.drawn_p99_ms, est.measured_p99_ms):>11}"
                   f"{100 * est.drawn_attainment:>9.2f}%")
        if detail:
            click.echo(format_like_for_like(est) + "\n")



def _named(doc: dict | None) -> str:
    if not doc:
        return "none (the bare profiles)"
    return f"v{doc['version']}" if "version" in doc else f"fitted on {doc['source']} (not stored)"


commands = [estimate_cmd]
