"""Calibration runs: fit the estimator's calibration from a live run's report folder
(``slipstream.planner.calibrate`` does the fitting; this module reads the reports and stores the result next to
the profiles), and the short calibration run ``slipstream demo`` and ``compare-live`` make first when
none is in force."""
from __future__ import annotations

from pathlib import Path

import click

CALIBRATION_TRACE = "step:rates=6/18/6,at=20/40,cv2=4,transition=5,duration=60"


def run_hardware(pipe, store, plan) -> dict[tuple[str, str], str]:
    """(stage, variant) -> the hardware a run ran it on: its plan's assignment (``Plan.hardware_of``),
    else the one hardware with a profile (a run without a plan, or a variant a re-plan brought)."""
    from ...streams.profile_store import lookup

    out = plan.hardware_of() if plan is not None else {}
    for st in pipe.stages:
        for v in st.variants:
            have = [h for h in pipe.hardware if lookup(store, v, h) is not None]
            if (st.name, v.name) not in out and len(have) == 1:
                out[(st.name, v.name)] = have[0]
    return out


def uncalibrated_curves(pipe, store) -> dict[tuple[str, str], object]:
    from ...streams.profile_store import lookup

    return {(v.name, h): prof.curve() for st in pipe.stages for v in st.variants for h in pipe.hardware
            if (prof := lookup(store, v, h)) is not None}


def fit_report(report_dirs: str | Path | list, pipe, profiles_dir: str | Path, *, store: bool = True) -> dict:
    """Fit one or more live runs' reports against the uncalibrated profiles; store the fit as the next
    version (with the scales of variants these runs did not run carried from the calibration in force)."""
    from ...planner.calibrate import carried_forward, fit_runs
    from ...streams.profile_store import ProfileStore

    reports = [Path(report_dirs)] if isinstance(report_dirs, (str, Path)) else [Path(r) for r in report_dirs]
    raw = ProfileStore(profiles_dir, calibration="off")  # fit against the profiles as measured
    runs = [run_hops(r, pipe, raw) for r in reports]
    doc = carried_forward(fit_runs(runs, uncalibrated_curves(pipe, raw), source=", ".join(map(str, reports))),
                          ProfileStore(profiles_dir).calibration)
    return raw.calibrations.save(doc) if store else doc


def run_hops(report: Path, pipe, raw_store):
    """A report's results, the hardware its plan ran each variant on and its batch timeouts."""
    from ...planner.calibrate import RunHops, timeouts_of
    from ...planner.plan import Plan
    from ..run_record import RESULTS, RunRecord

    run = RunRecord(report)
    if not run.has_results():
        raise click.ClickException(f"{report / RESULTS}: no results in this report")
    plan_doc = run.plan_doc()
    plan = Plan.from_dict(plan_doc) if plan_doc else None
    return RunHops(run.results(), run_hardware(pipe, raw_store, plan),
                   timeouts_of(plan_doc, run.configs_in_force()))


def calibrated(pipe, pipeline_file: str, store, when: str, opts, report_dir: Path):
    """The profile store with a calibration in force: a short live run fitted first when ``when`` says
    (``always``, or ``auto`` and none in force)."""
    from ...planner.calibrate import summary_lines
    from ...planner.profiles import ProfileStore
    from ..traces import trace_arrivals
    from ..traces import first_step_s
    from .run import live_run

    if when == "never" or (when == "auto" and store.calibration):
        if store.calibration:
            click.echo(f"calibration: v{store.calibration['version']} (from {store.calibration.get('source')})")
        return store
    click.echo(f"calibration run ({CALIBRATION_TRACE}): measures service, core sharing and Kafka transits here")
    arrivals = trace_arrivals(CALIBRATION_TRACE, opts.seed)
    live_run(pipe, pipeline_file, arrivals, arrivals[arrivals < first_step_s(CALIBRATION_TRACE)], store,
             report_dir / "calibration", opts, f"calibration: {pipe.name}, {opts.mode}, {CALIBRATION_TRACE}")
    for line in summary_lines(fit_report(report_dir / "calibration", pipe, store.root)):
        click.echo(line)
    return ProfileStore(store.root)


def refit(pipe, store, report_dirs: Path | list) -> None:
    """Store a calibration fitted on this run (or these runs, fitted as one): the next run plans with
    it, and every variant they served is measured."""
    from ...planner.calibrate import CalibrationFitError

    try:
        doc = fit_report(report_dirs, pipe, store.root)
    except CalibrationFitError as exc:
        click.echo(f"calibration not refitted: {exc}")
        return
    h = doc.get("host")
    click.echo(f"calibration v{doc['version']} fitted on {doc['source']} (the next run plans with it): service x"
               + ", x".join(f"{v['scale']:.2f} {k}" for k, v in doc["service"].items())
               + (f"; batches share {h['free_cores']:.2f} cores" if h else ""))
