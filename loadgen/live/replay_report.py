"""A replay into a live pipeline as the CLI and the live runs do it: the trace from its spec, the
payload from the source stage's executor (``slipstream.agents.zoo``), the open-loop replay with progress, the
table, and the report folder (``summary.*``, ``results.jsonl``, ``control.jsonl``, plots).

Used by ``slipstream loadgen replay``, the live runs (``slipstream.loadgen.live.run``), the fault suite and the
soak run."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import click
import numpy as np

from ...streams.config import cache_from_env
from ..run_record import RunRecord

ENVELOPE_WINDOWS_S = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2)


def envelope_rates(arrivals_s: np.ndarray, windows_s=ENVELOPE_WINDOWS_S) -> tuple[float, ...]:
    from ...tuner.envelope import envelope

    if len(arrivals_s) == 0:
        return tuple(0.0 for _ in windows_s)
    return tuple(float(x) for x in envelope(np.asarray(arrivals_s, dtype=float), windows_s))


def example_payload(pipe, payload_file: str | None) -> bytes:
    """What every replayed request carries: ``payload_file``'s bytes, else the source stage's example."""
    if payload_file:
        return Path(payload_file).read_bytes()
    from ...agents.zoo import load_executor

    stage = pipe.stage(pipe.source)
    variant = stage.variant(stage.defaults.variant)
    cache = cache_from_env()
    kw = {"cache_dir": cache} if cache else {}
    ex = load_executor(variant, pipe.hardware[stage.defaults.hardware], **kw)
    try:
        return ex.example_payload()
    finally:
        ex.close()


def replay_report(pipe, arrivals_s, payload: bytes, *, seed: int = 0, rate_scale: float = 1.0,
                  report_dir: str | None = None, run_id: str | None = None, drain_s: float = 30.0,
                  accuracy_floor: float | None = None, planned_arrivals=None, lag_budget_ms: float = 5.0,
                  label: str = "", gateway_url: str | None = None):
    """Replay ``arrivals_s`` open-loop into ``pipe`` with progress, print the table, write the report
    (also used by `slipstream demo`); returns the Summary."""
    from ...streams.config import KafkaSettings
    from ..render import format_table, write_report
    from ..replay import ReplayOptions, ReplayTarget, replay as run_replay, summarize_outcome
    from ..report import Envelope
    from ..schedule import build_schedule

    schedule = build_schedule(arrivals_s, seed=seed, rate_scale=rate_scale)
    if len(schedule) == 0:
        raise click.BadParameter("the trace holds no requests", param_hint="--trace")
    target = ReplayTarget(pipe.name, pipe.source, pipe.slo_ms, pipe.input_content_type, accuracy_floor, gateway_url)
    options = ReplayOptions(run_id=run_id or f"run-{int(time.time())}", drain_s=drain_s)
    click.echo(f"replaying {len(schedule)} requests over {schedule.duration_s:.1f} s into "
               f"{gateway_url or target.input_topic} (run {options.run_id})", err=True)
    outcome = asyncio.run(_with_progress(run_replay, schedule, target, KafkaSettings.from_env(),
                                         payload, options))
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
        run = RunRecord(Path(report_dir))
        files += [run.write_results(outcome.collector.collected()), run.write_control(outcome.config_records)]
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
