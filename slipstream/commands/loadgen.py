"""`slipstream loadgen show|replay|report`: trace sources, open-loop replay into Kafka, run reports.

The trace grammar is in ``loadgen/traces.py`` (and docs/loadgen.md); the replay with its payload,
progress and report folder is ``loadgen/live/replay_report.py``; this module only wires the CLI to them.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import numpy as np

from slipstream.loadgen import workloads
from slipstream.streams.arrivals import peak_rate_binned
from slipstream.loadgen.live.replay_report import example_payload, replay_report
from slipstream.loadgen.traces import trace_arrivals


def trace_stats(arrivals: np.ndarray) -> dict:
    n = len(arrivals)
    out = {"requests": n, "duration_s": float(arrivals[-1]) if n else 0.0}
    if n >= 3:
        rate, cv2 = workloads.inter_arrival_stats(arrivals)
        out.update(mean_qps=n / max(float(arrivals[-1]), 1e-9), cv2=cv2,
                   peak_1s_qps=peak_rate_binned(arrivals, 1.0),
                   peak_60s_qps=peak_rate_binned(arrivals, 60.0))
    return out


@click.group()
def loadgen() -> None:
    """Workload traces, open-loop replay and reports."""


@loadgen.command()
@click.option("--trace", "spec", required=True, help="Trace spec, e.g. gamma:rate=50,cv2=4,duration=60.")
@click.option("--seed", default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), help="Write the arrival times, one per line.")
def show(spec: str, seed: int, out: str | None) -> None:
    """Print a trace's statistics (requests, mean and peak rate, CV^2)."""
    a = trace_arrivals(spec, seed)
    click.echo(json.dumps(trace_stats(a), indent=1))
    if out:
        np.savetxt(out, a, fmt="%.9f")
        click.echo(f"wrote {len(a)} arrival times to {out}")


@loadgen.command()
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--trace", "spec", required=True, help="Trace spec (see docs/loadgen.md).")
@click.option("--scale", "rate_scale", default=1.0, show_default=True,
              help="Multiply the trace's rate on the same timeline.")
@click.option("--seed", default=0, show_default=True, help="Seed of the trace and of the rescaling.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="Write summary.json, summary.txt, results.jsonl and plots here.")
@click.option("--run-id", default=None, help="Request-id prefix [default: run-<epoch s>].")
@click.option("--drain-s", default=30.0, show_default=True, help="Wait this long for results after the last send.")
@click.option("--accuracy-floor", type=float, default=None, help="INFaaS accuracy floor on every request.")
@click.option("--payload-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Payload bytes [default: the source stage executor's example payload].")
@click.option("--planned-trace", default=None, help="Trace spec of the planned (sample) envelope.")
@click.option("--lag-budget-ms", default=5.0, show_default=True,
              help="p99 send lag above which the generator is reported as not keeping up.")
def replay(pipeline_file, spec, rate_scale, seed, report_dir, run_id, drain_s, accuracy_floor,
           payload_file, planned_trace, lag_budget_ms) -> None:
    """Replay a trace open-loop into a pipeline and report latency, attainment, drops and cost."""
    from slipstream.streams.spec import SpecError, load_pipeline

    try:
        pipe = load_pipeline(pipeline_file)
    except SpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--pipeline") from None
    payload = example_payload(pipe, payload_file)
    planned = trace_arrivals(planned_trace, seed) if planned_trace else None
    summary = replay_report(pipe, trace_arrivals(spec, seed), payload, seed=seed, rate_scale=rate_scale,
                            report_dir=report_dir, run_id=run_id, drain_s=drain_s,
                            accuracy_floor=accuracy_floor, planned_arrivals=planned,
                            lag_budget_ms=lag_budget_ms, label=f"{pipe.name} {spec}")
    if summary.lag is not None and not summary.lag.kept_up:
        sys.exit(3)  # a run whose load was not what was asked for must not look like a pass


@loadgen.command()
@click.argument("results_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--slo-ms", type=float, required=True)
@click.option("--sent", type=int, default=None, help="Requests sent [default: the results' count].")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write summary.json, summary.txt and plots here.")
@click.option("--label", default="")
def report(results_file: str, slo_ms: float, sent: int | None, out_dir: str | None, label: str) -> None:
    """Summarise a results.jsonl (from `loadgen replay --report` or any InferenceResult dump)."""
    from slipstream.loadgen.render import format_table, write_report
    from slipstream.loadgen.report import summarize
    from slipstream.loadgen.run_record import read_results

    results = read_results(results_file)
    try:
        summary = summarize(results, slo_ms=slo_ms, sent=sent, label=label or Path(results_file).stem)
    except (KeyError, ValueError) as exc:
        raise click.ClickException(f"{results_file}: {exc}") from None
    click.echo(format_table(summary))
    if out_dir:
        write_report(summary, out_dir)


commands = [loadgen]
