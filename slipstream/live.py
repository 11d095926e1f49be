"""A live run on the real broker, shared by `slipstream demo` and `slipstream compare-live`:
plan a pipeline from a sample, publish the StageConfigs, start the planned workers (with the tuner on
top, or not), replay a trace open-loop, and return the plan and the run's Summary."""
from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from streams import broker
from streams.config import KafkaSettings

READY = re.compile(rb"slipstream-worker ready stage=\S+ partitions=[1-9]")


@dataclass(frozen=True)
class LiveOptions:
    mode: str = "milp"
    tune: bool = True
    activation_s: float = 5.0
    max_replicas: int = 2
    hop_ms: float = 6.0
    seed: int = 0
    reserve_cores: float = 0.5


def ensure_broker() -> bool:
    """Start the local broker unless SLIPSTREAM_BOOTSTRAP names one; True when it was started here."""
    if os.environ.get("SLIPSTREAM_BOOTSTRAP"):
        return False
    b = broker.default_broker()
    started = broker.running_pid(b) is None
    broker.up(b, progress=click.echo)
    os.environ["SLIPSTREAM_BOOTSTRAP"] = b.bootstrap
    return started


def has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def profile_missing(pipe, store, batch_sizes=(1, 2, 4, 8), reps: int = 20) -> None:
    """Measure what the store lacks for this pipeline on this machine's hardware (with progress)."""
    from planner.profiler import ProfilerSettings, runnable_hardware
    from slipstream.commands.profile import profile_into

    todo = [(v, h) for st in pipe.stages for v in st.variants
            for h in runnable_hardware(pipe, has_cuda()) if store.get(v.name, h.name) is None]
    if not todo:
        click.echo(f"profiles: cached in {store.root}")
        return
    profile_into(store, todo, ProfilerSettings(tuple(batch_sizes), 3, reps))


def plan_and_publish(pipe, store, sample: np.ndarray, opts: LiveOptions, settings: KafkaSettings):
    """Plan from the sample, publish the StageConfigs (epochs after any on the control topic)."""
    from planner.modes import make_planner
    from planner.profiles import problem_from_pipeline
    from planner.service import handoff, stage_configs
    from streams import topics
    from streams.control_io import KafkaPublisher, latest_epoch
    from tuner import planfile
    from tuner.envelope import envelope

    problem = problem_from_pipeline(pipe, store, arrivals_s=sample, activation_s=opts.activation_s,
                                    hop_ms=opts.hop_ms)
    plan = make_planner(opts.mode).plan(problem)
    if not plan.feasible:
        raise click.ClickException(f"no feasible {opts.mode} plan: {plan.reason}")
    for sp in plan.stages:
        a = sp.primary
        click.echo(f"plan: {sp.stage}: {a.variant} on {a.hardware}, max batch {a.max_batch}, x{sp.replicas}")
    click.echo(f"plan: {plan.cost_per_hour:.3f} $/h, predicted p99 {plan.predicted_p99_ms} ms "
               f"for {plan.rate_qps:.1f} qps")

    async def publish() -> None:
        epoch = await latest_epoch(settings, pipe.name) + 1
        pub = KafkaPublisher(settings)
        await pub.start()
        try:
            for rec in stage_configs(pipe.name, plan, problem, epoch):
                await pub.publish(topics.control(pipe.name), "StageConfig", rec, key=rec["stage"])
        finally:
            await pub.stop()

    asyncio.run(publish())
    return plan, problem, planfile.from_handoff(handoff(problem, plan, envelope))


class Workers:
    """The planned workers as local processes (the tuner on top when asked), on a thread with its
    own event loop, so the replay keeps the main one."""

    def __init__(self, pipe, pipeline_file: str, tuner_plan, settings: KafkaSettings, log_dir: Path,
                 opts: LiveOptions) -> None:
        from tuner.policy import TunerConfig
        from tuner.service import describe
        from tuner.supervisor import LocalCapacity, local_supervisor

        self.log_dir = log_dir
        capacity = LocalCapacity(opts.reserve_cores)
        supervisor = local_supervisor(pipe, pipeline_file, tuner_plan.planned_replicas, capacity,
                                      log_dir=log_dir, env={"SLIPSTREAM_BOOTSTRAP": settings.bootstrap})
        self.stages = list(supervisor.initial)
        config = TunerConfig(activation_s=opts.activation_s,
                             max_replicas=min(opts.max_replicas, capacity.max_instances))

        def on_decision(d) -> None:
            for c in d.changes:
                click.echo(f"tuner: {c.stage} {c.previous} -> {c.replicas} replicas ({describe(c)})", err=True)

        async def tuner(stop_event: asyncio.Event) -> None:
            from tuner.run import run_tuner

            await run_tuner(pipe, tuner_plan, config, supervisor.actuator, dry_run=False, settings=settings,
                            interval_s=0.5, lookback_s=0.0, stop=stop_event, metrics_port=None,
                            on_decision=on_decision, max_instances=capacity.max_instances)

        ready = threading.Event()

        def main() -> None:
            self.loop = asyncio.new_event_loop()
            self.stop_event = asyncio.Event()
            ready.set()
            self.loop.run_until_complete(supervisor.run(self.stop_event, tuner if opts.tune else None))
            self.loop.close()

        self.thread = threading.Thread(target=main, name="supervisor", daemon=True)
        self.thread.start()
        ready.wait()

    def wait_ready(self, timeout_s: float = 180) -> None:
        """Each stage has a worker whose log holds its ready line (child-process logs: polled)."""
        deadline = time.monotonic() + timeout_s
        pending = set(self.stages)
        while pending and time.monotonic() < deadline and self.thread.is_alive():
            for st in list(pending):
                if any(READY.search(p.read_bytes()) for p in self.log_dir.glob(f"{st}-*.log")):
                    pending.discard(st)
            time.sleep(0.2)
        if pending:
            raise click.ClickException(f"workers of {sorted(pending)} not ready within {timeout_s:.0f} s; "
                                       f"see {self.log_dir}")

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(60)


def live_run(pipe, pipeline_file: str, arrivals: np.ndarray, sample: np.ndarray, store, report_dir: Path,
             opts: LiveOptions, label: str):
    """Plan, publish, run the workers, replay, report; returns (plan, summary)."""
    from slipstream.commands.loadgen import _payload_factory, replay_report
    from streams import admin, topics

    settings = KafkaSettings.from_env()
    asyncio.run(admin.ensure_topics(settings, topics.all_topics(pipe)))
    plan, problem, tuner_plan = plan_and_publish(pipe, store, sample, opts, settings)
    workers = Workers(pipe, pipeline_file, tuner_plan, settings, report_dir / "workers", opts)
    try:
        workers.wait_ready()
        click.echo("workers ready; replaying")
        summary = replay_report(pipe, arrivals, _payload_factory(pipe, None), seed=opts.seed,
                                report_dir=str(report_dir), run_id=f"{opts.mode}-{int(time.time())}",
                                planned_arrivals=problem.arrivals_s, label=label)
    finally:
        workers.stop()
    return plan, summary
