"""`slipstream calibrate --report DIR [--report DIR ...]`: fit service scale, service spread and Kafka
transits from live runs' hop timings (``slipstream.planner.calibrate``) and store them as the next calibration
version next to the profiles (``slipstream.streams.calibration``; the run plumbing: ``slipstream.loadgen.live.calibration``), where the planner, the planner service and the
workers read them.

``DIR`` is a report a live run wrote (``make demo``, ``slipstream compare-live``, ``loadgen replay``):
its ``results.jsonl``, and its ``plan.json`` to know which hardware ran each variant (without it a
variant must have a profile on one hardware only). Several reports fit as one calibration: give the
runs of every mode (``compare-live``'s report has one folder per mode) so every variant they ran has
its own scale.
"""
from __future__ import annotations

import click

from slipstream.options import state_default


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
    from slipstream.loadgen.live.calibration import fit_report
    from slipstream.planner.calibrate import CalibrationFitError, summary_lines
    from slipstream.streams.calibration import CalibrationStore
    from slipstream.streams.spec import load_pipeline

    try:
        doc = fit_report(list(report_dirs), load_pipeline(pipeline_file), profiles_dir, store=not dry_run)
    except CalibrationFitError as exc:
        raise click.ClickException(str(exc)) from None
    if not dry_run:
        click.echo(f"stored {CalibrationStore(profiles_dir).path(doc['version'])}")
    for line in summary_lines(doc):
        click.echo(line)


commands = [calibrate_cmd]
