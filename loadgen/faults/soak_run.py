"""`slipstream soak`: a long open-loop replay on the chaos stack, sampling memory and lag as it runs.

The stack is ``slipstream.loadgen.faults.chaos_run.Stack`` (workers, join, tuner and planner service under the local
supervisor). Every ``sample_s`` it records each process's RSS (``/proc/<pid>/status`` VmRSS: the
workers and services by role, the broker JVM(s), this load generator) and each consumer group's lag
(end offset minus committed offset, summed over the partitions of the group's input topic). After the
replay: attainment per window from the results. The verdicts and plots are ``slipstream.loadgen.soak``'s.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from ...streams import broker, topics
from ...streams.config import KafkaSettings, export_bootstrap
from ...streams.lag import LagReader, stage_groups
from .. import soak
from ..chaos import window_attainment
from .chaos_run import Stack, fresh_pipeline, interrupt_on_sigterm, tear_down
from .cluster import use_cluster


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except (FileNotFoundError, ProcessLookupError):
        pass
    return float("nan")


def broker_pids(cluster) -> dict[str, int]:
    nodes = cluster.local.nodes if cluster.local else ([cluster.single] if cluster.single else [])
    return {f"broker {b.node_id}" if cluster.local else "broker": pid
            for b in nodes if (pid := broker.running_pid(b)) is not None}


@dataclass(frozen=True)
class SoakOptions:
    pipeline_file: str
    minutes: float = 5.0
    rate_qps: float = 4.0
    brokers: int = 1
    sample_s: float = 5.0
    warmup_s: float = 60.0
    window_s: float = 30.0
    profiles_dir: str = ".state/profiles"
    report_dir: str = "reports/soak"
    mode: str = "milp"
    replan_s: float = 30.0
    seed: int = 0
    trace: str | None = None  # a trace spec (docs/loadgen.md) in place of Poisson at rate_qps

    @property
    def spec(self) -> str:
        return self.trace or f"poisson:rate={self.rate_qps:g},duration={self.minutes * 60:g}"


def run_soak(opts: SoakOptions) -> str:
    from ...planner.profiles import ProfileStore
    from ...streams.spec import load_pipeline
    from ..live.replay_report import example_payload
    from ..live.run import profile_missing
    from ..replay import ReplayOptions, ReplayTarget, replay
    from ..schedule import build_schedule
    from ..traces import trace_arrivals

    interrupt_on_sigterm()
    report = Path(opts.report_dir)
    cluster, started = use_cluster(opts.brokers)
    previous = export_bootstrap(cluster.bootstrap)  # for the run's processes; put back after it
    settings = KafkaSettings.from_env()
    path = fresh_pipeline(opts.pipeline_file, report, f"soak{cluster.brokers}-{int(time.time()) % 100000}")
    pipe = load_pipeline(path)
    store = ProfileStore(opts.profiles_dir)
    profile_missing(pipe, store)
    spec = opts.spec
    arrivals = trace_arrivals(spec, opts.seed)
    payload = example_payload(pipe, None)
    stack = Stack(pipe, path, store, settings, report / "logs", mode=opts.mode, sample=arrivals[arrivals < 60],
                  replan_s=opts.replan_s)
    groups = stage_groups(pipe)
    t_s: list[float] = []
    rss: dict[str, list[float]] = {}
    lag: dict[str, list[float]] = {}

    def put(store_: dict[str, list[float]], name: str, value: float) -> None:
        series = store_.setdefault(name, [float("nan")] * (len(t_s) - 1))
        series.append(value)

    async def sampler(stop: asyncio.Event, t0: float) -> None:
        reader = LagReader(settings, groups)
        await reader.start()
        try:
            while not stop.is_set():
                t_s.append(time.monotonic() - t0)
                procs = {role: pids[0] for role, pids in stack.pids().items() if pids}
                procs |= broker_pids(cluster) | {"loadgen (this process)": os.getpid()}
                for name, pid in procs.items():
                    put(rss, name, rss_mb(pid))
                for group, value in (await reader.read()).items():
                    put(lag, group.removeprefix(topics.consumer_group(pipe.name, "")), float(value))
                for d in (rss, lag):
                    for ys in d.values():
                        ys.extend([float("nan")] * (len(t_s) - len(ys)))
                try:
                    await asyncio.wait_for(stop.wait(), opts.sample_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            await reader.stop()

    schedule, run_id = build_schedule(arrivals, seed=opts.seed), f"soak-{int(time.time())}"

    async def main():
        stop = asyncio.Event()
        task = asyncio.create_task(sampler(stop, time.monotonic()))
        try:
            target = ReplayTarget(pipe.name, pipe.source, pipe.slo_ms, pipe.input_content_type)
            return await replay(schedule, target, settings, payload, ReplayOptions(run_id, drain_s=60.0))
        finally:
            stop.set()
            await task

    try:
        stack.wait_settled()
        click.echo(f"soak: {pipe.name}, {spec}, {cluster.brokers} broker(s); sampling every {opts.sample_s:g} s")
        outcome = asyncio.run(main())
    finally:
        restarts = tear_down(stack, settings, pipe, cluster, started)
        export_bootstrap(previous)
    by_id = outcome.collector.results
    sent_idx = np.flatnonzero(outcome.sent_mask)
    ids = [schedule.request_id(run_id, int(j)) for j in sent_idx]
    sent = outcome.actual_ns[sent_idx]
    ok = np.array([i in by_id and by_id[i].status == "done" and by_id[i].finished_ns <= by_id[i].deadline_ns
                   for i in ids], dtype=bool)
    win_t, win_att = window_attainment(sent, ok, int(sent.min()), int(sent.max()), opts.window_s, 1)
    samples_rss = soak.Samples(tuple(t_s), {k: tuple(v) for k, v in rss.items()})
    samples_lag = soak.Samples(tuple(t_s), {k: tuple(v) for k, v in lag.items()})
    rss_rows, lag_rows = soak.rss_rows(samples_rss, opts.warmup_s), soak.lag_rows(samples_lag, opts.warmup_s)
    attainment = float(ok.mean()) if len(ok) else float("nan")
    title = (f"slipstream soak: {pipe.name}, {spec}, {cluster.brokers} broker(s); {len(ids)} requests, "
             f"{outcome.collector.outstanding} without a result, {outcome.collector.duplicates} duplicate results, "
             f"{restarts} process restart(s)")
    text = title + "\n\n" + soak.format_tables(rss_rows, lag_rows, attainment, list(win_att))
    report.mkdir(parents=True, exist_ok=True)
    (report / "soak.md").write_text(text + "\n")
    (report / "soak.json").write_text(json.dumps({
        "title": title, "t_s": t_s, "rss_mb": rss, "lag": lag, "attainment": attainment,
        "attainment_windows": {"t_s": list(win_t), "attainment": list(win_att), "window_s": opts.window_s},
        "rss": [r.__dict__ for r in rss_rows], "lag_rows": [r.__dict__ for r in lag_rows]}, indent=1))
    soak.plot_series(samples_rss, report / "rss.png", f"RSS per process: {pipe.name}, {spec}", "RSS (MB)",
                     opts.warmup_s)
    soak.plot_series(samples_lag, report / "lag.png", f"consumer lag per group: {pipe.name}, {spec}",
                     "records not committed", opts.warmup_s)
    soak.plot_series(soak.Samples(tuple(win_t), {f"SLO met per {opts.window_s:g} s": tuple(100 * win_att)}),
                     report / "attainment.png", f"attainment over time: {pipe.name}, {spec}", "% within SLO")
    click.echo("\n" + text)
    click.echo(f"report: {report}/soak.md, soak.json, rss.png, lag.png, attainment.png")
    return text
