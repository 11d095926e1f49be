"""A live run on the real broker, shared by `slipstream demo` and `slipstream compare-live`:
plan a pipeline from a sample, publish the StageConfigs, start the planned workers (with the tuner on
top, or not), replay a trace open-loop, and return the plan and the run's Summary."""
from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import click
import numpy as np

from ...streams import broker
from ...streams.config import BOOTSTRAP_ENV, KafkaSettings, bootstrap_from_env
from ...tuner.service import ServiceSettings
from ..compare import ModeNotApplicable
from ..cpu import CpuSampler, ports_of
from ..run_record import RunRecord

READY = re.compile(rb"slipstream-worker ready stage=\S+ partitions=[1-9]\d* .*?at_ns=(\d+)")


@dataclass(frozen=True, kw_only=True)
class LiveOptions:
    mode: str = "milp"
    tune: bool = True
    activation_s: float = 5.0
    # a worker's added replica serves this long after the tuner's StageConfig (it takes a loaded spare replica,
    # slipstream.agents.stage.pool.SpareReplicas): record to the worker's config-in-force event, 5-45 ms, median 14 ms
    # over the 23 changes of runs s11 (docs/results.md)
    in_worker_activation_s: float = 0.02
    max_replicas: int = 2
    hop_ms: float = 6.0
    seed: int = 0
    reserve_cores: float = 0.5
    # host CPU per request the profiles and the calibration's host fit leave out (HostModel.request_cpu_ms)
    request_cpu_ms: float = 0.0
    window_cpu_ms: float = 0.0  # and per window a stage's worker takes (HostModel.window_cpu_ms)
    replan_s: float = 30.0  # the planner service's interval during the run (0: plan once, at start)
    pace_ceiling: float = 3.0  # slipstream.tuner.pace.PaceConfig.ceiling; 1: the tuner ignores the workers' pace
    sample_cpu: bool = False  # CPU seconds per kind of process during the replay (slipstream.loadgen.cpu)
    via_gateway: bool = False  # replay through a gateway process (HTTP) started for the run, not to Kafka


@dataclass(frozen=True)
class Published:
    """A plan on the control topic: the plan, its problem, epoch and the tuner's hand-off."""

    plan: object
    problem: object
    epoch: int
    tuner_plan: object


def ensure_broker(state_dir: Path) -> bool:
    """Start the local broker (its state under ``state_dir``) unless SLIPSTREAM_BOOTSTRAP names one;
    True when it was started here."""
    if bootstrap_from_env():
        return False
    b = broker.default_broker(root=state_dir)
    started = broker.running_pid(b) is None
    broker.up(b, progress=click.echo)
    os.environ[BOOTSTRAP_ENV] = b.bootstrap
    return started


def profile_missing(pipe, store, batch_sizes=(1, 2, 4, 8), reps: int = 20) -> None:
    """Measure what the store lacks for this pipeline on this machine's hardware (with progress)."""
    from ...agents.zoo import load_executor
    from ...planner.profiler import ProfilerSettings, has_cuda, profile_into, runnable_hardware

    todo = [(v, h) for st in pipe.stages for v in st.variants
            for h in runnable_hardware(pipe, has_cuda()) if store.get(v.name, h.name) is None]
    if not todo:
        click.echo(f"profiles: cached in {store.root}")
        return
    profile_into(store, todo, load_executor, ProfilerSettings(tuple(batch_sizes), 3, reps))


def local_problem(pipe, store, opts: LiveOptions, **kw):
    """The planning problem of a run on this host: no stage above the replicas one worker process runs
    here (``slipstream.tuner.supervisor.LocalCapacity``), no more than that per stage in all, no CPU hardware
    with more threads than the host's cores (its cgroup's limit when one is set; ``cores=None``: every
    entry, for a run recorded elsewhere), and the host's co-located work (:func:`colocated_host`)."""
    from ...planner.profiles import problem_from_pipeline
    from ...streams.placement import available_cpus
    from ...tuner.supervisor import LocalCapacity

    cap = LocalCapacity(opts.reserve_cores).max_replicas
    kw.setdefault("cores", available_cpus())
    problem = problem_from_pipeline(pipe, store, activation_s=opts.activation_s, hop_ms=opts.hop_ms,
                                    max_replicas=cap * len(pipe.stages), max_stage_replicas=cap, **kw)
    return replace(problem, host=colocated_host(problem.host, opts.request_cpu_ms, kw["cores"], opts.window_cpu_ms))


def colocated_host(host, request_cpu_ms: float, cores: float | None, window_cpu_ms: float = 0.0):
    """The host a live run plans on: the calibration's (its cores, and as ``background_cores`` what
    its batches could not use, which holds the flat load of the broker, the load generator and the
    control plane) with ``request_cpu_ms`` per request and ``window_cpu_ms`` per window on top
    (``HostModel``); without a calibration, this host's ``cores`` with that load alone (None: no
    host model)."""
    from ...planner.sim.params import HostModel

    if request_cpu_ms <= 0 and window_cpu_ms <= 0:
        return host
    if host is None:
        return HostModel(float(cores), request_cpu_ms=request_cpu_ms, window_cpu_ms=window_cpu_ms) if cores else None
    return replace(host, request_cpu_ms=request_cpu_ms, window_cpu_ms=window_cpu_ms)


def plan_and_publish(pipe, store, sample: np.ndarray, opts: LiveOptions, settings: KafkaSettings) -> Published:
    """Plan from the sample, publish the StageConfigs and the tuner's hand-off (epochs after any on
    the control topic)."""
    from ...planner.modes import make_planner
    from ...planner.run import publish_plan
    from ...planner.service import handoff, stage_configs
    from ...streams.control_io import KafkaPublisher, latest_epoch
    from ...streams.control_rules import next_epoch
    from ...tuner import planfile
    from ...tuner.envelope import envelope

    problem = local_problem(pipe, store, opts, arrivals_s=sample)
    plan = make_planner(opts.mode).plan(problem)  # infeasible: the highest-capacity plan (slipstream.planner.fallback)
    if not plan.stages:
        raise ModeNotApplicable(f"no {opts.mode} plan: {plan.reason}")
    if not plan.feasible:
        click.echo(f"plan: {plan.notes[0]}", err=True)
    for sp in plan.stages:
        a = sp.primary
        click.echo(f"plan: {sp.stage}: {a.variant} on {a.hardware}, max batch {a.max_batch}, x{sp.replicas}")
    click.echo(f"plan: {plan.cost_per_hour:.3f} $/h, predicted p99 {plan.p99_text()} "
               f"for {plan.rate_qps:.1f} qps")

    async def publish():
        epoch = next_epoch(await latest_epoch(settings, pipe.name))
        pub = KafkaPublisher(settings, pipe.name)
        await pub.start()
        try:
            return await publish_plan(pub, pipe.name, stage_configs(pipe.name, plan, problem, epoch),
                                      handoff(problem, plan, envelope), epoch, time.time_ns())
        finally:
            await pub.stop()

    record = asyncio.run(publish())
    return Published(plan, problem, record.epoch, planfile.from_handoff(record, pipeline=pipe))


TUNER_TICK_S = ServiceSettings.interval_s  # the live tuner's decision period


def tuner_config(opts: LiveOptions, replicas_per_worker: int):
    """The live tuner's ``slipstream.tuner.policy.TunerConfig``: replicas capped by ``--max-replicas`` and what
    one worker process holds (``replicas_per_worker``)."""
    from ...tuner.policy import TunerConfig

    return TunerConfig(activation_s=opts.activation_s, max_replicas=min(opts.max_replicas, replicas_per_worker))


def control_plane(pipe, published: Published, store, opts: LiveOptions, settings: KafkaSettings, actuator,
                  replicas_per_worker: int, on_decision=None):
    """``control(stop)``: the tuner on ``actuator`` and, with ``opts.replan_s``, the planner service
    re-planning from live arrivals every ``replan_s`` (its plans reach the tuner as hand-offs on the
    control topic); both until ``stop``."""
    from ...planner.run import run_planner
    from ...planner.service import ReplanSettings, Replanner, ReplanState
    from ...streams.shared_arrivals import SharedArrivals
    from ...tuner.envelope import envelope
    from ...tuner.pace import PaceConfig
    from ...tuner.run import run_tuner

    config = tuner_config(opts, replicas_per_worker)
    replanner = Replanner(local_problem(pipe, store, opts, rate_qps=1.0), pipe.name,
                          ReplanSettings(mode=opts.mode), envelope=envelope, calibration=store.calibration)

    def on_step(out, measured_p99_ms) -> None:
        if out.changed:
            reps = {sp.stage: sp.replicas for sp in out.plan.stages}
            click.echo(f"planner: re-planned for {out.forecast_qps:.1f} qps: replicas {reps}, "
                       f"{out.plan.cost_per_hour:.3f} $/h", err=True)

    async def control(stop: asyncio.Event) -> None:
        # the tuner and the planner service read the same arrivals: one reader (streams.shared_arrivals)
        shared = SharedArrivals(settings, pipe.name, pipe.source, spec=pipe, lookback_s=0.0)
        tasks = [run_tuner(pipe, published.tuner_plan, config, actuator, dry_run=False, settings=settings,
                           interval_s=TUNER_TICK_S, lookback_s=0.0, stop=stop, metrics_addr=None,
                           on_decision=on_decision, replicas_per_worker=replicas_per_worker,
                           pace=PaceConfig(ceiling=opts.pace_ceiling), arrivals_source=shared.reader)]
        if opts.replan_s > 0:
            tasks.append(run_planner(pipe, replanner, settings, interval_s=opts.replan_s, lookback_s=0.0,
                                     stop=stop, on_step=on_step,
                                     initial=ReplanState(published.epoch, published.plan),
                                     arrivals_source=shared.reader))
        await asyncio.gather(*tasks)

    return control


class Workers:
    """The planned workers as local processes (the tuner on top when asked), on a thread with its
    own event loop, so the replay keeps the main one."""

    def __init__(self, pipe, pipeline_file: str, published: Published, store, settings: KafkaSettings,
                 log_dir: Path, opts: LiveOptions) -> None:
        from ...tuner.service import describe, describe_shares
        from ...tuner.supervisor import LocalCapacity, local_supervisor

        self.log_dir = log_dir
        self.started_ns = time.time_ns()  # the logs may hold ready lines of an earlier run: not these
        capacity = LocalCapacity(opts.reserve_cores)
        supervisor = local_supervisor(pipe, pipeline_file, published.tuner_plan.planned_replicas, capacity,
                                      log_dir=log_dir, env={BOOTSTRAP_ENV: settings.bootstrap},
                                      profiles=str(store.root), kafka=settings)
        self.stages = list(supervisor.initial)
        self.actuator = supervisor.actuator

        def on_decision(d) -> None:
            for c in d.changes:
                click.echo(f"tuner: {c.stage} {c.previous} -> {c.replicas} replicas ({describe(c)})", err=True)
            for sc in d.share_changes:
                click.echo(f"tuner: {sc.stage} shares ({describe_shares(sc)})", err=True)

        tuner = control_plane(pipe, published, store, opts, settings, supervisor.actuator,
                              capacity.max_replicas, on_decision)

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
        """Each stage has a worker whose log holds a ready line written since these workers started
        (child-process logs: polled; a report folder's logs are appended to run after run)."""
        deadline = time.monotonic() + timeout_s
        pending = set(self.stages)
        while pending and time.monotonic() < deadline and self.thread.is_alive():
            for st in list(pending):
                if ready_since(self.log_dir, st, self.started_ns):
                    pending.discard(st)
            time.sleep(0.2)
        if pending:
            raise click.ClickException(f"workers of {sorted(pending)} not ready within {timeout_s:.0f} s; "
                                       f"see {self.log_dir}")

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(60)

    def ids(self) -> set[str]:
        return started_ids(self.actuator.started)


def started_ids(started) -> set[str]:
    """The ``worker`` ids (``HopTiming.worker`` less its replica index) of the workers ``started`` ((role,
    pid) pairs): a stage worker's, or for the ``join`` role the join worker's."""
    from ...streams.procs import join_id, worker_id

    return {join_id(pid) if role == "join" else worker_id(pid) for role, pid in started}


def foreign_hops(results, ours: set[str]) -> dict[str, int]:
    """Hops per worker process not in ``ours``: another run's workers, still in the stages' consumer
    groups, served them, and the run measured more than its plan."""
    out: dict[str, int] = {}
    for r in results:
        for h in r.hops:
            process = h.worker.rsplit("/", 1)[0]
            if process and process not in ours:
                out[process] = out.get(process, 0) + 1
    return out


def warn_foreign(report_dir: Path, ours: set[str]) -> str:
    """The warning for a run some of whose hops other workers served ("" when none did), also
    appended to its ``summary.txt``."""
    record = RunRecord(report_dir)
    results = record.results() if record.has_results() else []
    foreign = foreign_hops(results, ours)
    if not foreign:
        return ""
    total = sum(len(r.hops) for r in results)
    text = (f"WARNING: {sum(foreign.values())} of {total} hops were served by workers this run did not start "
            f"({', '.join(f'{w} x{n}' for w, n in sorted(foreign.items()))}): stop them and run again")
    with (report_dir / "summary.txt").open("a") as fh:
        fh.write(text + "\n")
    return text


def ready_since(log_dir: Path, stage: str, since_ns: int) -> bool:
    """Whether a worker log of ``stage`` in ``log_dir`` holds a ready line stamped at or after ``since_ns``."""
    return any(int(m.group(1)) >= since_ns for p in log_dir.glob(f"{stage}-*.log")
               for m in READY.finditer(p.read_bytes()))


@dataclass(frozen=True)
class LiveResult:
    plan: object
    summary: object
    estimate: object  # slipstream.loadgen.replay_estimate.LikeForLike: the estimator on this run's own arrivals
    cpu_s: dict | None = None  # kind of process -> CPU seconds during the replay (opts.sample_cpu)


def live_run(pipe, pipeline_file: str, arrivals: np.ndarray, sample: np.ndarray, store, report_dir: Path,
             opts: LiveOptions, label: str) -> LiveResult:
    """Plan, publish, run the workers, replay, report, and replay the run through the estimator."""
    from ...streams import admin, topics
    from .replay_report import example_payload, replay_report

    settings = KafkaSettings.from_env()
    asyncio.run(admin.ensure_topics(settings, topics.all_topics(pipe)))
    published = plan_and_publish(pipe, store, sample, opts, settings)
    plan, problem = published.plan, published.problem
    report_dir.mkdir(parents=True, exist_ok=True)
    RunRecord(report_dir).write_plan(plan)  # for calibrate
    workers = Workers(pipe, pipeline_file, published, store, settings, report_dir / "workers", opts)
    cpu, gw = None, None
    try:
        gw = start_gateway(pipeline_file) if opts.via_gateway else None
        workers.wait_ready()
        url = gateway_url(gw) if gw is not None else None
        click.echo(f"workers ready; replaying{f' through the gateway at {url}' if url else ''}")
        sampler = CpuSampler(ports=ports_of(settings.bootstrap)).start() if opts.sample_cpu else None
        try:
            summary = replay_report(pipe, arrivals, example_payload(pipe, None), seed=opts.seed,
                                    report_dir=str(report_dir), run_id=f"{opts.mode}-{int(time.time())}",
                                    planned_arrivals=problem.arrivals_s, label=label, gateway_url=url)
        finally:
            cpu = sampler.stop() if sampler is not None else None
    finally:
        workers.stop()
        if gw is not None:
            gw.stop()
    foreign = warn_foreign(report_dir, workers.ids())
    if foreign:
        click.echo(foreign, err=True)
    return LiveResult(plan, summary, estimate_live(problem, plan, summary, report_dir, opts, store.calibration), cpu)


def start_gateway(pipeline_file: str):
    """A gateway process for the pipeline on a free loopback port (``gateway_url`` once ready)."""
    import sys

    from ...gateway.server import READY as GATEWAY_READY
    from ...streams.procs import ReadyProcess

    return ReadyProcess([sys.executable, "-m", "slipstream.cli", "gateway", "--pipeline", str(pipeline_file),
                         "--addr", "127.0.0.1:0"], ready=GATEWAY_READY, name="gateway")


def gateway_url(gw, timeout_s: float = 90.0) -> str:
    from ...gateway.server import READY as GATEWAY_READY

    gw.wait_ready(timeout_s)
    return "http://" + next(m.group(1) for m in map(GATEWAY_READY.search, list(gw.lines)) if m)


def estimate_live(problem, plan, summary, report_dir: Path, opts: LiveOptions, calibration=None):
    """The estimator on the run's own arrivals and replica changes (:func:`like_for_like`), written
    next to the report as ``estimate.txt``."""
    from ..replay_estimate import format_like_for_like

    est = like_for_like(problem, plan, summary, report_dir, opts, calibration=calibration)
    (report_dir / "estimate.txt").write_text(format_like_for_like(est) + "\n")
    return est


def like_for_like(problem, plan, summary, report_dir: Path, opts: LiveOptions, forward: bool = True,
                  calibration=None):
    """``slipstream.loadgen.replay_estimate.estimate_run`` on a live run's report (its ``results.jsonl``), with
    the forward prediction when ``forward``: the tuner policy (when the run was tuned) stepped over the
    run's arrivals with the live tuner's config and period, from the hand-off of ``problem`` (whose
    arrivals are the planning sample); the plan's variants whose pace ``calibration`` (the one the
    planner used) did not measure are named."""
    from ...planner.estimator import Transit, network_for
    from ...streams.calibration import pace_sources
    from ...tuner.supervisor import LocalCapacity
    from ..replay_estimate import estimate_run, run_arrivals
    from ..simulate import published_handoff, tuner_changes

    run = RunRecord(report_dir)
    results, control = run.results(), run.control()
    schedule = [] if forward else None
    if forward and opts.tune:
        config = tuner_config(opts, LocalCapacity(opts.reserve_cores).max_replicas)
        schedule = tuner_changes(problem, plan, run_arrivals(results)[0], tick_s=TUNER_TICK_S, config=config)
    # a result's finished_ns is stamped before the hop to the results topic: leave that hop out
    problem = replace(problem, activation_s=opts.activation_s,
                      network=replace(network_for(problem), to_results=Transit.constant(0.0)))
    est = estimate_run(problem, plan, summary, results, control=control, seed=opts.seed, forward=schedule,
                       in_worker_activation_s=opts.in_worker_activation_s, handoff=published_handoff(problem, plan))
    return replace(est, unmeasured_pace=pace_sources(calibration, [(v, h) for (_, v), h in plan.hardware_of().items()]))
