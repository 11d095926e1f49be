"""`slipstream simulate` and `slipstream compare`: planner (+ tuner) against the estimator, no Kafka.

For traces and profiles too large for this machine: the planner plans on a sample (the first
``--sample-share`` of the trace, InferLine's 25 %), the tuner policy is stepped over the rest of the
trace exactly as the tuner service would step it (its envelope tracker fed with the arrivals, one
decision every ``--tick-s``), and the estimator replays the live part with the tuner's replica
changes. The report is the one `loadgen replay` writes (``slipstream.loadgen.simulate``).

Planner modes come from ``slipstream.planner.modes.make_planner``; a plan the estimator rejected on the sample
is still simulated (with a note), so a comparison shows what each mode would have done.
"""
from __future__ import annotations

import json
from pathlib import Path
import click

from slipstream.options import key_values

from slipstream.loadgen.compare import ModeNotApplicable
from slipstream.loadgen.traces import trace_arrivals
from slipstream.planner.modes import MODES

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "research-data" / "UMass-LIDS+Loki"
TUNED_MODES = ("milp", "inferline", "loki")


def plan_with(mode: str, problem):
    """The plan of ``mode`` (``slipstream.planner.modes``). The baselines are not tightened by the estimator: a
    comparison wants their plan as InferLine defines it, whatever attainment it gets."""
    from slipstream.planner.modes import make_planner

    return make_planner(mode, solver="highs", time_limit_s=20.0,
                        validate=not mode.startswith("cg-")).plan(problem)


def _run(problem_src, mode: str, trace: str, seed: int, sample_share: float, tune: bool, tick_s: float,
         activation_s: float, label: str | None = None):
    from slipstream.loadgen.simulate import simulate_run, tuner_changes
    from slipstream.tuner.policy import TunerConfig

    arrivals = trace_arrivals(trace, seed)
    split = float(arrivals[-1]) * sample_share if sample_share > 0 else float(arrivals[-1])
    sample = arrivals[arrivals < split] if sample_share > 0 else arrivals
    live = arrivals[arrivals >= split] - split if sample_share > 0 else arrivals
    if len(sample) < 2 or len(live) < 2:
        raise click.ClickException("the trace is too short for this --sample-share")
    problem = problem_src(sample)
    plan = plan_with(mode, problem)
    if not plan.stages:
        raise ModeNotApplicable(f"{mode}: no plan: {plan.reason}")
    notes = () if plan.feasible else ((plan.notes or (plan.reason,))[0],)  # the highest-capacity plan
    changes = (tuner_changes(problem, plan, live, tick_s=tick_s, config=TunerConfig(activation_s=activation_s))
               if tune and mode in TUNED_MODES else [])
    note = (f"planned on the first {100 * sample_share:g}% of the trace ({len(sample)} requests), "
            f"simulated on the rest" if sample_share > 0 else "planned on the whole trace (oracle)")
    return simulate_run(problem, plan, live, changes=changes, seed=seed, activation_s=activation_s,
                        label=label or f"{problem.name} {mode}{'+tuner' if changes or tune else ''}",
                        notes=(note, *notes)), plan


def _problem_source(problem_file: str | None, preset: str, data_dir: str, slo_ms: float | None,
                    prices: dict[str, float]):
    """A function sample-arrivals -> Problem: a planner problem file, or a preset on published data."""
    from dataclasses import replace

    if problem_file:
        from slipstream.planner.problem import load_problem
        from slipstream.streams.arrivals import peak_rate_sliding

        base = load_problem(problem_file)
        return lambda sample: replace(base, arrivals_s=sample, rate_qps=peak_rate_sliding(sample, 1.0),
                                      **({"slo_ms": slo_ms} if slo_ms else {}))
    from slipstream.loadgen import published

    pr = {**published.DEFAULT_PRICES, **prices}
    if not (Path(data_dir) / "aggregate_profiled.csv").exists():
        raise click.ClickException(f"{data_dir}/aggregate_profiled.csv not found: pass --data-dir or --problem")
    if preset == "traffic":
        return lambda sample: published.traffic_problem(data_dir, sample, slo_ms=slo_ms or 250.0, prices=pr)
    models = preset.split(":", 1)[1].split("/") if preset.startswith("single:") else None
    if not models:
        raise click.BadParameter("--preset is traffic or single:MODEL[/MODEL..]", param_hint="--preset")
    return lambda sample: published.single_stage_problem(data_dir, sample, models, slo_ms=slo_ms or 250.0,
                                                         prices=pr)


def _prices(values: tuple[str, ...]) -> dict[str, float]:
    return key_values(values, float, "--price", "HW=PRICE")


common = [
    click.option("--trace", "spec", required=True, help="Trace spec (see docs/loadgen.md)."),
    click.option("--problem", "problem_file", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="Planner problem JSON (docs/planner.md); its arrivals are replaced by the trace."),
    click.option("--preset", default="traffic", show_default=True,
                 help="Without --problem: 'traffic' (Loki's detect->classify) or single:MODEL[/MODEL..] "
                      "on the published profiles."),
    click.option("--data-dir", default=str(DATA_DIR), show_default=True, help="research-data/UMass-LIDS+Loki."),
    click.option("--slo-ms", type=float, default=None, help="Override the SLO."),
    click.option("--price", multiple=True, help="HW=PRICE per hour (repeatable), e.g. ampere=3.2."),
    click.option("--seed", default=0, show_default=True),
    click.option("--sample-share", default=0.25, show_default=True,
                 help="Plan on this first share of the trace, simulate the rest (0 = plan on all of it)."),
    click.option("--tick-s", default=1.0, show_default=True, help="Tuner decision period."),
    click.option("--activation-s", default=5.0, show_default=True, help="Replica activation (rebalance) time."),
]


def _with(options):
    def deco(f):
        for o in reversed(options):
            f = o(f)
        return f
    return deco


@click.command()
@_with(common)
@click.option("--mode", default="milp", show_default=True,
              type=click.Choice(MODES))
@click.option("--no-tuner", is_flag=True, help="Keep the planned replicas all along.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None)
def simulate(spec, problem_file, preset, data_dir, slo_ms, price, seed, sample_share, tick_s, activation_s,
             mode, no_tuner, report_dir) -> None:
    """Plan, tune and replay a trace through the estimator; print (and write) the run report."""
    from slipstream.loadgen.render import format_table, write_report
    from slipstream.loadgen.run_record import RunRecord

    source = _problem_source(problem_file, preset, data_dir, slo_ms, _prices(price))
    try:
        run, plan = _run(source, mode, spec, seed, sample_share, not no_tuner, tick_s, activation_s)
    except ModeNotApplicable as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(format_table(run.summary))
    if report_dir:
        write_report(run.summary, report_dir)
        RunRecord(Path(report_dir)).write_plan(plan)


@click.command()
@_with(common)
@click.option("--modes", default="milp+tuner,inferline+tuner,cg-peak,cg-mean", show_default=True,
              help="Comma-separated MODE or MODE+tuner.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None, help="Write the table as JSON.")
def compare(spec, problem_file, preset, data_dir, slo_ms, price, seed, sample_share, tick_s, activation_s,
            modes, out_file) -> None:
    """One trace through several planner modes (simulated): cost and SLO attainment side by side."""
    from slipstream.loadgen.compare import compare_runs, failures, format_comparison

    source = _problem_source(problem_file, preset, data_dir, slo_ms, _prices(price))

    def runner(mode: str, tuned: bool):
        run, _ = _run(source, mode, spec, seed, sample_share, tuned, tick_s, activation_s,
                      label=f"{mode}{'+tuner' if tuned else ''}")
        return run.summary

    rows = compare_runs([m.strip() for m in modes.split(",") if m.strip()], runner)
    click.echo(format_comparison(rows))
    if out_file:
        Path(out_file).write_text(json.dumps([r.to_dict() for r in rows], indent=1) + "\n")
    if failures(rows):
        raise click.ClickException(f"mode(s) failed:\n{failures(rows)}")


commands = [simulate, compare]
