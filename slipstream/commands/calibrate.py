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
    from planner.calibrate import RunHops, timeouts_of

    results_file, plan_file = report / "results.jsonl", report / "plan.json"
    if not results_file.exists():
        raise click.ClickException(f"{results_file}: no results in this report")
    results = [json.loads(line) for line in results_file.read_text().splitlines() if line.strip()]
    plan_doc = json.loads(plan_file.read_text()) if plan_file.exists() else None
    return RunHops(results, hardware_of(pipe, raw_store, plan_doc), timeouts_of(plan_doc))


@click.command("calibrate")
@click.option("--report", "report_dirs", required=True, multiple=True, type=click.Path(exists=True, file_okay=False),
              help="A live run's report folder (results.jsonl, plan.json); repeat to fit several runs as one.")
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The pipeline spec the run served.")
@click.option("--profiles", "profiles_dir", default=".state/profiles", show_default=True,
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


commands = [calibrate_cmd]
