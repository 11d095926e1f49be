"""`slipstream demo`: the main job, end to end on this machine.

1. start the local Kafka broker (unless ``SLIPSTREAM_BOOTSTRAP`` names one) and create the topics;
2. profile the example pipeline's real variants (cached in the profile store, per machine);
3. plan it for its SLO from the quiet first phase of the trace (milp by default), check the plan with
   the estimator, and publish one StageConfig per stage to the control topic;
4. start the planned workers as local processes, with the tuner on top (`slipstream up`'s supervisor);
5. replay a bursty trace open-loop (the rate triples in the middle: the tuner has to react);
6. print the report and the plot paths, and shut everything down (also on Ctrl-C).
"""
from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from pathlib import Path

import click
import numpy as np

from streams import broker
from streams.config import KafkaSettings

DEFAULT_TRACE = "step:rates=6/18/6,at=45/105,cv2=4,transition=5,duration=150"
READY = re.compile(rb"slipstream-worker ready stage=\S+ partitions=[1-9]")


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _profile(pipe, store, batch_sizes=(1, 2, 4, 8), reps: int = 20) -> None:
    """Measure what the store lacks for this pipeline on this machine's hardware."""
    from tqdm import tqdm

    from agents.zoo import load_executor
    from planner.profiler import ProfilerSettings, profile_variant, runnable_hardware

    todo = [(v, h) for st in pipe.stages for v in st.variants
            for h in runnable_hardware(pipe, _has_cuda()) if store.get(v.name, h.name) is None]
    if not todo:
        click.echo(f"profiles: cached in {store.root}")
        return
    settings = ProfilerSettings(tuple(batch_sizes), 3, reps)
    with tqdm(total=len(todo) * len(batch_sizes), unit="batch size", desc="profiling") as bar:
        for v, h in todo:
            bar.set_postfix_str(f"{v.name}@{h.name}")
            store.save(profile_variant(v, h, load_executor, settings, progress=bar.update))


def _wait_workers_ready(log_dir: Path, stages: list[str], stop: threading.Event, timeout_s: float = 180) -> None:
    """Each stage has a worker whose log holds its ready line (logs of child processes: polled)."""
    deadline = time.monotonic() + timeout_s
    pending = set(stages)
    while pending and time.monotonic() < deadline and not stop.is_set():
        for st in list(pending):
            if any(READY.search(p.read_bytes()) for p in log_dir.glob(f"{st}-*.log")):
                pending.discard(st)
        time.sleep(0.2)
    if pending:
        raise click.ClickException(f"workers of {sorted(pending)} not ready within {timeout_s:.0f} s; "
                                   f"see {log_dir}")


@click.command()
@click.option("--pipeline", "pipeline_file", default="deploy/pipelines/image-classify.yaml", show_default=True,
              type=click.Path(exists=True, dir_okay=False))
@click.option("--trace", "spec", default=DEFAULT_TRACE, show_default=True, help="Trace spec (docs/loadgen.md).")
@click.option("--plan-seconds", default=40.0, show_default=True,
              help="The planner plans from this first part of the trace (the tuner handles the rest).")
@click.option("--mode", type=click.Choice(["milp", "inferline", "loki", "cg-mean", "cg-peak"]), default="milp",
              show_default=True)
@click.option("--profiles", "profiles_dir", default=".state/profiles", show_default=True)
@click.option("--report", "report_dir", default="reports/demo", show_default=True)
@click.option("--activation-s", default=5.0, show_default=True, help="Worker activation time for the tuner.")
@click.option("--max-replicas", default=2, show_default=True, help="Per stage (2 cores here).")
@click.option("--hop-ms", default=6.0, show_default=True,
              help="Kafka transit per hop for the estimator (p50 per hop of `slipstream bench dataplane`).")
@click.option("--seed", default=0, show_default=True)
def demo(pipeline_file, spec, plan_seconds, mode, profiles_dir, report_dir, activation_s, max_replicas,
         hop_ms, seed) -> None:
    """Run the example pipeline end to end: broker, profile, plan, workers + tuner, replay, report."""
    from slipstream.commands.loadgen import _payload_factory, _trace, replay_report
    from streams import admin, topics
    from streams.spec import load_pipeline

    started_broker = False
    if not os.environ.get("SLIPSTREAM_BOOTSTRAP"):
        b = broker.default_broker()
        started_broker = broker.running_pid(b) is None
        broker.up(b, progress=click.echo)
        os.environ["SLIPSTREAM_BOOTSTRAP"] = b.bootstrap
    settings = KafkaSettings.from_env()
    pipe = load_pipeline(pipeline_file)
    report = Path(report_dir)
    log_dir = report / "workers"
    stop_flag = threading.Event()
    supervisor_thread = None
    stop_holder: dict = {}
    try:
        created = asyncio.run(admin.ensure_topics(settings, topics.all_topics(pipe)))
        click.echo(f"topics: {len(created)} created, {len(topics.all_topics(pipe)) - len(created)} existing")
        from planner.profiles import ProfileStore

        store = ProfileStore(profiles_dir)
        _profile(pipe, store)
        arrivals = _trace(spec, seed)
        plan, problem, tuner_plan = _plan(pipe, store, arrivals[arrivals < plan_seconds], mode, settings,
                                          activation_s=activation_s, hop_ms=hop_ms)
        supervisor_thread = _start_workers(pipe, pipeline_file, tuner_plan, settings, log_dir,
                                           activation_s, max_replicas, stop_holder)
        _wait_workers_ready(log_dir, [s.name for s in pipe.stages], stop_flag)
        click.echo("workers ready; replaying")
        payloads = _payload_factory(pipe, None)
        summary = replay_report(pipe, arrivals, payloads, seed=seed, report_dir=str(report),
                                run_id=f"demo-{int(time.time())}", planned_arrivals=problem.arrivals_s,
                                label=f"demo: {pipe.name}, {mode} + tuner, {spec}")
        click.echo(f"\nplan ({mode}): predicted p99 {plan.predicted_p99_ms} ms at {plan.rate_qps:.1f} qps; "
                   f"measured p99 {summary.latency.p99_ms:.1f} ms")
        click.echo(f"report and plots in {report}/ (summary.txt, summary.json, *.png); worker logs in {log_dir}/")
    except KeyboardInterrupt:  # Ctrl-C: the finally below stops workers, tuner and broker
        stop_flag.set()
        click.echo("interrupted: shutting down", err=True)
    finally:
        if supervisor_thread is not None:
            loop, stop = stop_holder["loop"], stop_holder["stop"]
            loop.call_soon_threadsafe(stop.set)
            supervisor_thread.join(60)
        if started_broker:
            broker.down(broker.default_broker(), progress=click.echo)


def _plan(pipe, store, sample: np.ndarray, mode: str, settings: KafkaSettings, **problem_options):
    """Plan from the sample, publish the StageConfigs (epochs after any on the control topic)."""
    from planner.modes import make_planner
    from planner.profiles import problem_from_pipeline
    from planner.service import handoff, stage_configs
    from streams import topics
    from streams.control_io import KafkaPublisher, latest_epoch
    from tuner import planfile
    from tuner.envelope import envelope

    problem = problem_from_pipeline(pipe, store, arrivals_s=sample, **problem_options)
    plan = make_planner(mode).plan(problem)
    if not plan.feasible:
        raise click.ClickException(f"no feasible {mode} plan: {plan.reason}")
    for sp in plan.stages:
        a = sp.primary
        click.echo(f"plan: {sp.stage}: {a.variant} on {a.hardware}, max batch {a.max_batch}, "
                   f"x{sp.replicas}")
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


def _start_workers(pipe, pipeline_file, tuner_plan, settings, log_dir, activation_s, max_replicas, holder):
    """The supervisor (planned workers + tuner) on a thread of its own, with its own event loop."""
    from streams.procs import worker_argv
    from tuner.actuators import LocalProcessActuator
    from tuner.policy import TunerConfig
    from tuner.run import run_tuner
    from tuner.service import describe
    from tuner.supervisor import Supervisor

    actuator = LocalProcessActuator(lambda stage: worker_argv(pipeline_file, stage, "info"), log_dir=log_dir,
                                    env={"SLIPSTREAM_BOOTSTRAP": settings.bootstrap})
    supervisor = Supervisor(actuator, tuner_plan.planned_replicas)
    config = TunerConfig(activation_s=activation_s, max_replicas=max_replicas)

    def on_decision(d) -> None:
        for c in d.changes:
            click.echo(f"tuner: {c.stage} {c.previous} -> {c.replicas} replicas ({describe(c)})", err=True)

    def main() -> None:
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()
        holder.update(loop=loop, stop=stop)
        published.set()

        async def tuner(stop_event: asyncio.Event) -> None:
            await run_tuner(pipe, tuner_plan, config, actuator, dry_run=False, settings=settings,
                            interval_s=0.5, lookback_s=0.0, stop=stop_event, metrics_port=None,
                            on_decision=on_decision)

        loop.run_until_complete(supervisor.run(stop, tuner))
        loop.close()

    published = threading.Event()
    t = threading.Thread(target=main, name="supervisor", daemon=True)
    t.start()
    published.wait()
    return t


commands = [demo]
