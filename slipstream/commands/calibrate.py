"""`slipstream calibrate --report DIR [--report DIR ...]`: fit service scale, service spread and Kafka
transits from live runs' hop timings (``planner.calibrate``) and store them as the next calibration
version next to the profiles (``streams.calibration``), where the planner, the planner service and the
workers read them.

``DIR`` is a report a live run wrote (``make demo``, ``slipstream compare-live``, ``loadgen replay``):
its ``results.jsonl``, and its ``plan.json`` to know which hardware ran each variant (without it a
variant must have a profile on one hardware only). Several reports fit as one calibration: give the
runs of every mode (``compare-live``'s report has one folder per mode) so every variant they ran has
its own scale.
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from slipstream.options import state_default


def hardware_of(pipe, store, plan_doc: dict | None) -> dict[tuple[str, str], str]:
    """(stage, variant) -> hardware: the plan's assignment, else the one hardware with a profile."""
    from streams.profile_store import lookup

    out: dict[tuple[str, str], str] = {}
    if plan_doc:
        for sp in plan_doc.get("stages", []):
            for a in sp["assignments"]:
                out[(sp["stage"], a["variant"])] = a["hardware"]
    for st in pipe.stages:
        for v in st.variants:
            have = [h for h in pipe.hardware if lookup(store, v, h) is not None]
            if (st.name, v.name) not in out and len(have) == 1:
                out[(st.name, v.name)] = have[0]
    return out


def uncalibrated_curves(pipe, store) -> dict[tuple[str, str], object]:
    from streams.profile_store import lookup

    return {(v.name, h): prof.curve() for st in pipe.stages for v in st.variants for h in pipe.hardware
            if (prof := lookup(store, v, h)) is not None}


def fit_report(report_dirs: str | Path | list, pipe, profiles_dir: str | Path, *, store: bool = True) -> dict:
    """Fit one or more live runs' reports against the uncalibrated profiles; store the fit as the next
    version (with the scales of variants these runs did not run carried from the calibration in force)."""
    from planner.calibrate import carried_forward, fit_runs
    from streams.profile_store import ProfileStore

    reports = [Path(report_dirs)] if isinstance(report_dirs, (str, Path)) else [Path(r) for r in report_dirs]
    raw = ProfileStore(profiles_dir, calibration="off")  # fit against the profiles as measured
    runs = [run_hops(r, pipe, raw) for r in reports]
    doc = carried_forward(fit_runs(runs, uncalibrated_curves(pipe, raw), source=", ".join(map(str, reports))),
                          ProfileStore(profiles_dir).calibration)
    return raw.calibrations.save(doc) if store else doc


def run_hops(report: Path, pipe, raw_store):
    """A report's results, the hardware its plan ran each variant on and its batch timeouts."""
    from planner.calibrate import RunHops, configs_in_force, timeouts_of
    from slipstream.commands.loadgen import read_control

    results_file, plan_file = report / "results.jsonl", report / "plan.json"
    if not results_file.exists():
        raise click.ClickException(f"{results_file}: no results in this report")
    results = [json.loads(line) for line in results_file.read_text().splitlines() if line.strip()]
    plan_doc = json.loads(plan_file.read_text()) if plan_file.exists() else None
    start_ns = min((r["created_ns"] for r in results), default=0)
    return RunHops(results, hardware_of(pipe, raw_store, plan_doc),
                   timeouts_of(plan_doc, configs_in_force(read_control(report), start_ns)))


@click.command("calibrate")
@click.option("--report", "report_dirs", required=True, multiple=True, type=click.Path(exists=True, file_okay=False),
              help="A live run's report folder (results.jsonl, plan.json); repeat to fit several runs as one.")
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The pipeline spec the run served.")
@click.option("--profiles", "profiles_dir", default=state_default("profiles"), show_default="STATE_DIR/profiles",
              type=click.Path(file_okay=False), help="Profile store; the calibration is stored in its calibration/.")
@click.option("--dry-run", is_flag=True, help="Print the fit, store nothing.")
def calibrate_cmd(report_dirs: tuple[str, ...], pipeline_file: str, profiles_dir: str, dry_run: bool) -> None:
    """Fit the estimator's service, host and transit parameters from a live run and store them, versioned."""
    from planner.calibrate import CalibrationFitError, summary_lines
    from streams.calibration import CalibrationStore
    from streams.spec import load_pipeline

    try:
        doc = fit_report(list(report_dirs), load_pipeline(pipeline_file), profiles_dir, store=not dry_run)
    except CalibrationFitError as exc:
        raise click.ClickException(str(exc)) from None
    if not dry_run:
        click.echo(f"stored {CalibrationStore(profiles_dir).path(doc['version'])}")
    for line in summary_lines(doc):
        click.echo(line)


@click.command("estimate")
@click.option("--report", "report_dirs", required=True, multiple=True, type=click.Path(exists=True, file_okay=False),
              help="A finished live run's report folder (results.jsonl, plan.json, summary.json); repeatable.")
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--profiles", "profiles_dir", default=state_default("profiles"), show_default="STATE_DIR/profiles", type=click.Path(file_okay=False))
@click.option("--fit", "fit_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Estimate with a calibration fitted on these reports (in memory, not stored) instead of the one "
                   "in force: fit on some runs, check on others.")
@click.option("--activation-s", default=1.0, show_default=True, help="As the live runs had it.")
@click.option("--seed", default=0, show_default=True)
@click.option("--detail", is_flag=True, help="Also each run's per-stage table (residence, hop components).")
def estimate_cmd(report_dirs, pipeline_file, profiles_dir, fit_dirs, activation_s, seed, detail) -> None:
    """The estimator on finished live runs, like for like: each run's own arrivals, replica changes,
    re-plans, plan and each model's measured pace (est. p99; drawn p99: the pace drawn from the
    calibration instead), with the calibration in force ($SLIPSTREAM_CALIBRATION) or one fitted with --fit."""
    from loadgen.compare import est_ratio
    from loadgen.render import read_summary
    from loadgen.replay_estimate import format_like_for_like
    from planner.calibrate import recalibrated
    from planner.plan import Plan
    from slipstream.live import LiveOptions, like_for_like, local_problem
    from streams.profile_store import ProfileStore
    from streams.spec import load_pipeline

    pipe, store = load_pipeline(pipeline_file), ProfileStore(profiles_dir)
    doc = fit_report(list(fit_dirs), pipe, profiles_dir, store=False) if fit_dirs else store.calibration
    click.echo(f"calibration: {_named(doc)}")
    opts = LiveOptions(activation_s=activation_s, seed=seed)
    click.echo(f"{'report':<40}{'p99 ms':>9}{'est. p99':>10}{'est/meas':>9}{'seeds ms':>12}{'SLO met':>9}{'est. SLO':>9}"
               f"{'drawn p99':>10}{'drawn/meas':>11}")
    for rep in map(Path, report_dirs):
        summary, plan = read_summary(rep / "summary.json"), Plan.from_dict(json.loads((rep / "plan.json").read_text()))
        problem = local_problem(pipe, store, opts, rate_qps=max(plan.rate_qps, 1.0))  # the run's arrivals replace it
        if fit_dirs:
            problem = recalibrated(problem, doc, store.calibration)
        est = like_for_like(problem, plan, summary, rep, opts, forward=False)  # the planning sample is not stored
        seeds = f"{min(est.seed_p99_ms):.0f}-{max(est.seed_p99_ms):.0f}"
        click.echo(f"{str(rep):<40}{est.measured_p99_ms:>9.1f}{est.estimated_p99_ms:>10.1f}"
                   f"{est_ratio(est.estimated_p99_ms, est.measured_p99_ms):>9}{seeds:>12}"
                   f"{100 * est.measured_attainment:>8.2f}%{100 * est.estimated_attainment:>8.2f}%"
                   f"{est.drawn_p99_ms:>10.1f}{est_ratio(est.drawn_p99_ms, est.measured_p99_ms):>11}")
        if detail:
            click.echo(format_like_for_like(est) + "\n")


def _named(doc: dict | None) -> str:
    if not doc:
        return "none (the bare profiles)"
    return f"v{doc['version']}" if "version" in doc else f"fitted on {doc['source']} (not stored)"


commands = [calibrate_cmd, estimate_cmd]
