"""`slipstream plan`: plan a pipeline with one of the planner modes and print the plan.

Either a self-contained problem file (``--problem``, format in docs/planner.md) or a pipeline spec
plus a profile store and an arrival trace (``--pipeline --profiles --trace``/``--rate``).
"""
from __future__ import annotations

import json

import click

from slipstream.options import profiles_option
import numpy as np

from slipstream.planner.modes import MODES


def build_problem(problem_file, pipeline_file, profiles_dir, trace, rate):
    from slipstream.planner.problem import ProblemError, load_problem, read_sample
    from slipstream.planner.profiles import ProfileError, ProfileStore, problem_from_pipeline
    from slipstream.streams.spec import SpecError, load_pipeline

    try:
        if problem_file:
            return load_problem(problem_file)
        if not (pipeline_file and profiles_dir and (trace or rate)):
            raise click.UsageError("give --problem FILE, or --pipeline FILE --profiles DIR and --trace T or --rate R")
        arrivals = read_sample(trace) if trace else None
        return problem_from_pipeline(load_pipeline(pipeline_file), ProfileStore(profiles_dir),
                                     arrivals_s=arrivals, rate_qps=rate)
    except (ProblemError, ProfileError, SpecError) as exc:
        raise click.ClickException(str(exc)) from None


def with_host(problem, cores: str | None, background_cores: float | None, request_cpu_ms: float | None,
              window_cpu_ms: float | None = None):
    """``problem`` on the host the options declare (``slipstream.planner.problem.declared_host``); unchanged when
    none is given. ``cores`` "auto": this process's (its cgroup's limit, else the machine's count)."""
    from dataclasses import replace

    from slipstream.planner.problem import declared_host

    if cores is None and background_cores is None and request_cpu_ms is None and window_cpu_ms is None:
        return problem
    try:
        n = None if cores in (None, "auto") else float(cores)
        return replace(problem, host=declared_host(n, background_cores or 0.0, request_cpu_ms or 0.0,
                                                        window_cpu_ms or 0.0))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--host-cores") from None


def host_options(f):
    """``--host-cores``, ``--host-background-cores``, ``--host-request-cpu-ms``, ``--host-window-cpu-ms``:
    the host a plan must fit."""
    for o in reversed([
        click.option("--host-cores", default=None, metavar="N|auto",
                     help="Plan for a host of N cores shared with the co-located processes (auto: this "
                          "process's cgroup CPU limit, else the machine's count)."),
        click.option("--host-background-cores", type=click.FloatRange(min=0), default=None,
                     help="Cores other work takes on the host whatever the rate [default: 0]."),
        click.option("--host-request-cpu-ms", type=click.FloatRange(min=0), default=None,
                     help="CPU ms the broker, load generator and gateway spend per request [default: 0]."),
        click.option("--host-window-cpu-ms", type=click.FloatRange(min=0), default=None,
                     help="CPU ms a stage's worker spends per window beyond the model's (fetch, produce, commit), "
                          "counted once per stage a request visits [default: 0]."),
    ]):
        f = o(f)
    return f


def render(plan, problem, lines) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    t = Table(title=f"{plan.mode} plan for {problem.name} at {plan.rate_qps:.1f} qps, SLO {problem.slo_ms:.0f} ms")
    for col in ("stage", "variant", "hardware", "max batch", "timeout ms", "replicas", "weight", "partitions"):
        t.add_column(col)
    for sp in plan.stages:
        for a in sp.assignments:
            t.add_row(sp.stage, a.variant, a.hardware, str(a.max_batch), f"{a.batch_timeout_ms:.1f}",
                      str(a.replicas), f"{a.weight:.2f}", str(sp.partitions))
    con.print(t)
    p99 = plan.p99_text()
    att = "" if plan.attainment is None else f", attainment {plan.attainment:.4f}"
    con.print(f"cost {plan.cost_per_hour:.4f} $/h, accuracy {plan.accuracy:.4f}, analytical latency "
              f"{plan.analytic_latency_ms:.1f} ms, predicted p99 {p99}{att}, solve {plan.solve_time_s:.3f} s")
    con.print("[green]feasible[/]" if plan.feasible else f"[red]infeasible[/]: {plan.reason}")
    for line in lines:
        con.print(f"  {line}")


@click.command("plan")
@click.option("--problem", "problem_file", type=click.Path(exists=True, dir_okay=False), help="Problem JSON file.")
@click.option("--pipeline", "pipeline_file", type=click.Path(exists=True, dir_okay=False), help="Pipeline spec YAML.")
@profiles_option()
@click.option("--trace", type=click.Path(exists=True, dir_okay=False), help="Arrival times (s), one per line.")
@click.option("--rate", type=float, help="Planning rate (qps) instead of a trace (Poisson sample).")
@click.option("--mode", type=click.Choice(MODES), default="milp", show_default=True)
@click.option("--solver", type=click.Choice(["highs", "cbc"]), default="highs", show_default=True)
@click.option("--time-limit", type=float, default=10.0, show_default=True, help="MILP time limit per solve (s).")
@click.option("--no-validate", is_flag=True, help="Skip the estimator check (and tightening).")
@click.option("--explain", is_flag=True, help="Binding constraints, rounds, runner-up plan.")
@click.option("--measured-p99", type=float, help="Measured p99 (ms) to compare with the prediction.")
@click.option("--json", "as_json", is_flag=True)
@host_options
def plan(problem_file, pipeline_file, profiles_dir, trace, rate, mode, solver, time_limit, no_validate,
         explain, measured_p99, as_json, host_cores, host_background_cores, host_request_cpu_ms,
         host_window_cpu_ms) -> None:
    """Plan each stage's variant, hardware, max batch and replicas inside the SLO (and the host's
    cores, with --host-*)."""
    from slipstream.planner import milp
    from slipstream.planner.modes import make_planner
    from slipstream.planner.service import explain as explain_lines

    problem = with_host(build_problem(problem_file, pipeline_file, profiles_dir, trace, rate),
                        host_cores, host_background_cores, host_request_cpu_ms, host_window_cpu_ms)
    result = make_planner(mode, solver=solver, time_limit_s=time_limit, validate=not no_validate).plan(problem)
    lines: list[str] = []
    runner = None
    if explain:
        if mode == "milp" and result.feasible:
            runner = milp.runner_up(problem, result, milp.MilpOptions(solver, time_limit))
        lines = explain_lines(result, runner, measured_p99)
    if as_json:
        doc = result.to_dict()
        doc["problem"] = {"name": problem.name, "slo_ms": problem.slo_ms, "rate_qps": problem.rate_qps,
                          "sample_requests": int(np.asarray(problem.arrivals_s).size),
                          "host": None if problem.host is None else problem.host.__dict__.copy()}
        if explain:
            doc["explain"] = lines
            doc["runner_up"] = runner.to_dict() if runner is not None else None
        click.echo(json.dumps(doc, indent=2, default=float))
    else:
        render(result, problem, lines)
    if not result.feasible:
        raise SystemExit(2)


commands = [plan]
