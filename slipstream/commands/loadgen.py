"""`slipstream loadgen show|replay|report`: trace sources, open-loop replay into Kafka, run reports.

The trace grammar is in ``loadgen/traces.py`` (and docs/loadgen.md); this module only wires the
CLI to it: it loads the pipeline spec, builds the payload from the source stage's executor
(``agents.zoo``: only the CLI may import the data plane), and computes envelopes with ``tuner``.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import click
import numpy as np

from loadgen import workloads
from loadgen.traces import TraceSpecError, load_trace

ENVELOPE_WINDOWS_S = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2)


def _trace(spec: str, seed: int) -> np.ndarray:
    try:
        return load_trace(spec, seed=seed)
    except (TraceSpecError, OSError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--trace") from None


def trace_stats(arrivals: np.ndarray) -> dict:
    n = len(arrivals)
    out = {"requests": n, "duration_s": float(arrivals[-1]) if n else 0.0}
    if n >= 3:
        rate, cv2 = workloads.inter_arrival_stats(arrivals)
        out.update(mean_qps=n / max(float(arrivals[-1]), 1e-9), cv2=cv2,
                   peak_1s_qps=workloads.peak_rate(arrivals, 1.0),
                   peak_60s_qps=workloads.peak_rate(arrivals, 60.0))
    return out


def envelope_rates(arrivals_s: np.ndarray, windows_s=ENVELOPE_WINDOWS_S) -> tuple[float, ...]:
    from tuner.envelope import envelope

    if len(arrivals_s) == 0:
        return tuple(0.0 for _ in windows_s)
    return tuple(float(x) for x in envelope(np.asarray(arrivals_s, dtype=float), windows_s))


@click.group()
def loadgen() -> None:
    """Workload traces, open-loop replay and reports."""


def read_control(report_dir: Path) -> list[tuple[int, dict]]:
    """A report's ``control.jsonl`` (:func:`_write_control`) as (Kafka timestamp ns, record); [] for
    older reports, which have none (the estimator then replays replica changes only)."""
    path = Path(report_dir) / "control.jsonl"
    return [(d["at_ns"], d["record"]) for d in map(json.loads, path.read_text().splitlines())] if path.exists() else []


@loadgen.command()
@click.option("--trace", "spec", required=True, help="Trace spec, e.g. gamma:rate=50,cv2=4,duration=60.")
@click.option("--seed", default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), help="Write the arrival times, one per line.")
def show(spec: str, seed: int, out: str | None) -> None:
    """Print a trace's statistics (requests, mean and peak rate, CV^2)."""
    a = _trace(spec, seed)
    click.echo(json.dumps(trace_stats(a), indent=1))
    if out:
        np.savetxt(out, a, fmt="%.9f")
        click.echo(f"wrote {len(a)} arrival times to {out}")


def _payload_factory(pipe, payload_file: str | None):
    if payload_file:
        data = Path(payload_file).read_bytes()
        return lambda i: data
    from agents.zoo import load_executor

    stage = pipe.stage(pipe.source)
    variant = stage.variant(stage.defaults.variant)
    kw = {"cache_dir": os.environ["SLIPSTREAM_CACHE"]} if os.environ.get("SLIPSTREAM_CACHE") else {}
    ex = load_executor(variant, pipe.hardware[stage.defaults.hardware], **kw)
    try:
        data = ex.example_payload()
    finally:
        ex.close()
    return lambda i: data


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
    from streams.spec import SpecError, load_pipeline

    try:
        pipe = load_pipeline(pipeline_file)
    except SpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--pipeline") from None
    payloads = _payload_factory(pipe, payload_file)
    planned = _trace(planned_trace, seed) if planned_trace else None
    summary = replay_report(pipe, _trace(spec, seed), payloads, seed=seed, rate_scale=rate_scale,
                            report_dir=report_dir, run_id=run_id, drain_s=drain_s,
                            accuracy_floor=accuracy_floor, planned_arrivals=planned,
                            lag_budget_ms=lag_budget_ms, label=f"{pipe.name} {spec}")
    if summary.lag is not None and not summary.lag.kept_up:
        sys.exit(3)  # a run whose load was not what was asked for must not look like a pass


def replay_report(pipe, arrivals_s, payloads, *, seed: int = 0, rate_scale: float = 1.0,
                  report_dir: str | None = None, run_id: str | None = None, drain_s: float = 30.0,
                  accuracy_floor: float | None = None, planned_arrivals=None, lag_budget_ms: float = 5.0,
                  label: str = ""):
    """Replay ``arrivals_s`` open-loop into ``pipe`` with progress, print the table, write the report
    (also used by `slipstream demo`); returns the Summary."""
    from loadgen.render import format_table, write_report
    from loadgen.replay import ReplayOptions, ReplayTarget, replay as run_replay, summarize_outcome
    from loadgen.report import Envelope
    from loadgen.schedule import build_schedule
    from streams.config import KafkaSettings

    schedule = build_schedule(arrivals_s, seed=seed, rate_scale=rate_scale)
    if len(schedule) == 0:
        raise click.BadParameter("the trace holds no requests", param_hint="--trace")
    target = ReplayTarget(pipe.name, pipe.source, pipe.slo_ms, pipe.input_content_type, accuracy_floor)
    options = ReplayOptions(run_id=run_id or f"run-{int(time.time())}", drain_s=drain_s)
    click.echo(f"replaying {len(schedule)} requests over {schedule.duration_s:.1f} s into "
               f"{target.input_topic} (run {options.run_id})", err=True)
    outcome = asyncio.run(_with_progress(run_replay, schedule, target, KafkaSettings.from_env(),
                                         payloads, options))
    sent = outcome.actual_ns[outcome.sent_mask]
    planned = planned_arrivals if planned_arrivals is not None else schedule.offsets_ns / 1e9
    windows = tuple(w for w in ENVELOPE_WINDOWS_S if w <= max(schedule.duration_s, ENVELOPE_WINDOWS_S[0]))
    env = Envelope(windows, envelope_rates((sent - sent.min()) / 1e9 if len(sent) else sent, windows),
                   envelope_rates(planned, windows),
                   "planned" if planned_arrivals is not None else "scheduled")
    prices = {h.name: h.cost_per_hour for h in pipe.hardware.values()}
    defaults = [{"stage": s.name, "replicas": s.defaults.replicas, "hardware": s.defaults.hardware,
                 "variant": s.defaults.variant, "cost_per_hour": 0.0} for s in pipe.stages]
    summary = summarize_outcome(outcome, slo_ms=pipe.slo_ms, pipeline=pipe.name, prices=prices,
                                label=label, envelope=env, lag_budget_ms=lag_budget_ms,
                                default_configs=defaults)
    click.echo(format_table(summary))
    if report_dir:
        files = write_report(summary, report_dir)
        _write_results(outcome.collector.collected(), Path(report_dir) / "results.jsonl")
        _write_control(outcome.config_records, Path(report_dir) / "control.jsonl")
        click.echo(f"report: {', '.join(str(f) for f in files)}", err=True)
    return summary


async def _with_progress(run, *args):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    schedule = args[0]
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=False, refresh_per_second=4) as bar:
        sent_task = bar.add_task("sent", total=len(schedule))
        res_task = bar.add_task("results", total=len(schedule))

        def progress(sent: int, results: int, total: int) -> None:
            bar.update(sent_task, completed=sent)
            bar.update(res_task, completed=results)

        return await run(*args, progress=progress)


def _write_results(results, path: Path) -> None:
    """Raw results without payload bytes, one JSON object per line (input of `loadgen report`)."""
    with path.open("w") as fh:
        for r in results:
            fh.write(json.dumps({k: v for k, v in r.items() if k != "output"}) + "\n")


def _write_control(records, path: Path) -> None:
    """What the run saw on the control topic (StageConfigs, ScalingActions), each with its Kafka
    timestamp: ``{"at_ns": ..., "record": {...}}`` per line (``slipstream estimate`` replays the
    re-plans' batching changes from it)."""
    with path.open("w") as fh:
        for at_ns, rec in records:
            fh.write(json.dumps({"at_ns": int(at_ns), "record": rec}) + "\n")


@loadgen.command()
@click.argument("results_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--slo-ms", type=float, required=True)
@click.option("--sent", type=int, default=None, help="Requests sent [default: the results' count].")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write summary.json, summary.txt and plots here.")
@click.option("--label", default="")
def report(results_file: str, slo_ms: float, sent: int | None, out_dir: str | None, label: str) -> None:
    """Summarise a results.jsonl (from `loadgen replay --report` or any InferenceResult dump)."""
    from loadgen.render import format_table, write_report
    from loadgen.report import summarize

    with open(results_file) as fh:
        results = [json.loads(line) for line in fh if line.strip()]
    try:
        summary = summarize(results, slo_ms=slo_ms, sent=sent, label=label or Path(results_file).stem)
    except (KeyError, ValueError) as exc:
        raise click.ClickException(f"{results_file}: {exc}") from None
    click.echo(format_table(summary))
    if out_dir:
        write_report(summary, out_dir)


commands = [loadgen]
