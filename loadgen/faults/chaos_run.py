"""`slipstream chaos`: the fault suite on a running pipeline (the arithmetic is ``slipstream.loadgen.chaos``).

One :class:`Stack` serves every case: a fresh copy of the pipeline (its own topics and groups, made
with the cluster's replication), its plan published, and the local supervisor
(``slipstream.tuner.supervisor``) running the stage workers, the join, the tuner (publishing its decisions as
StageConfigs; it starts no process) and the planner service, each a process of its own that the
supervisor restarts when it dies. Then, per case: wait until every role runs and every worker is
ready, replay the trace open-loop (``slipstream.loadgen.replay``), inject the case's fault ``fault_at_s`` after the
first send, read every result record of the replay back from the results topic, and score it.

Broker faults need a broker this command can restart: the single local broker (``kafka up``) or the
local cluster (``kafka up --brokers 3``); on another cluster they are skipped with a note.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click
import numpy as np
import yaml

from ...streams import broker, codec, kafka as kclient, topics
from ...streams.config import BOOTSTRAP_ENV, KafkaSettings, export_bootstrap
from .. import chaos
from ..live.run import READY  # one parser of the worker's ready line
from .cluster import Cluster, use_cluster

FREEZE_S = KafkaSettings().session_timeout_s + 5.0  # past the worker's consumer-group session timeout


def fresh_pipeline(src: str, out_dir: Path, suffix: str) -> Path:
    """A copy of the spec under a fresh name: own topics, groups and control history."""
    doc = yaml.safe_load(Path(src).read_text())
    doc["name"] = f"{doc['name']}-{suffix}"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def services_for(replan_s: float) -> tuple[str, ...]:
    """The control-plane services a stack runs: the tuner, and the planner service unless ``replan_s`` is 0."""
    return ("tuner", "planner") if replan_s > 0 else ("tuner",)


class Stack:
    """The pipeline's processes under the local supervisor, on a thread with its own event loop."""

    def __init__(self, pipe, pipeline_file: Path, store, settings: KafkaSettings, log_dir: Path, *,
                 mode: str = "milp", sample: np.ndarray, replan_s: float = 30.0, activation_s: float = 1.0,
                 reserve_cores: float = 0.5, standby: int = 0) -> None:
        from ...streams import admin
        from ...tuner.supervisor import LocalCapacity, local_supervisor
        from ..live.run import LiveOptions, plan_and_publish

        self.pipe, self.settings, self.log_dir = pipe, settings, log_dir
        asyncio.run(admin.ensure_topics(settings, topics.all_topics(pipe)))
        opts = LiveOptions(mode=mode, activation_s=activation_s, max_replicas=2, reserve_cores=reserve_cores,
                           replan_s=replan_s)
        self.published = plan_and_publish(pipe, store, sample, opts, settings)
        capacity = LocalCapacity(reserve_cores)
        cli = [sys.executable, "-m", "slipstream.cli"]
        services = {
            "tuner": cli + ["chaos-tuner", "--pipeline", str(pipeline_file), "--activation-s", str(activation_s),
                            "--max-replicas", str(capacity.max_replicas)],
            "planner": cli + ["planner", "--pipeline", str(pipeline_file), "--profiles", str(store.root),
                              "--mode", mode, "--interval", str(replan_s)],
        }
        services = {k: v for k, v in services.items() if k in services_for(replan_s)}
        env = {**os.environ, BOOTSTRAP_ENV: settings.bootstrap}
        self.supervisor = local_supervisor(pipe, str(pipeline_file), self.published.tuner_plan.planned_replicas,
                                           capacity, log_dir=log_dir, env=env, loglevel="warn",
                                           profiles=str(store.root), services=services, standby=standby,
                                           kafka=settings)
        self.services = tuple(services)
        self.workers = tuple(r for r in self.supervisor.initial if r not in services)
        ready = threading.Event()

        def main() -> None:
            self.loop = asyncio.new_event_loop()
            self.stop_event = asyncio.Event()
            ready.set()
            self.loop.run_until_complete(self.supervisor.run(self.stop_event, None))
            self.loop.close()

        self.thread = threading.Thread(target=main, name="supervisor", daemon=True)
        self.thread.start()
        ready.wait()

    def pid(self, role: str) -> int:
        pids = self.supervisor.actuator.pids(role)
        if not pids:
            raise RuntimeError(f"no running process for {role}")
        return pids[0]

    def pids(self) -> dict[str, list[int]]:
        return {r: self.supervisor.actuator.pids(r) for r in self.supervisor.initial}

    def _newest_log(self, role: str) -> Path | None:
        logs = sorted(self.log_dir.glob(f"{role}-*.log"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
        return logs[-1] if logs else None

    def settled(self) -> list[str]:
        """Roles not yet back: fewer processes than wanted (standby ones included), or (workers) no ready
        line in the newest process's log."""
        waiting = []
        for role in self.supervisor.initial:
            if len(self.supervisor.actuator.pids(role)) < max(1, self.supervisor.actuator.desired(role)):
                waiting.append(role)
            elif role in self.workers:
                log = self._newest_log(role)
                if log is None or not READY.search(log.read_bytes()):
                    waiting.append(role)
        return waiting

    def wait_settled(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while (waiting := self.settled()) and time.monotonic() < deadline and self.thread.is_alive():
            time.sleep(0.3)  # child-process logs: polled
        if waiting:
            raise click.ClickException(f"{waiting} not running and ready within {timeout_s:.0f} s; see {self.log_dir}")

    @property
    def restarts(self) -> int:
        return self.supervisor.actuator.unexpected_exits

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(90)


async def results_end(settings: KafkaSettings, topic: str) -> dict[int, int]:
    cons = kclient.consumer(settings, group_id=None, enable_auto_commit=False)
    await cons.start()
    try:
        tps = await kclient.topic_partitions(cons, topic)
        return {tp.partition: off for tp, off in (await cons.end_offsets(tps)).items()}
    finally:
        await cons.stop()


async def read_results(settings: KafkaSettings, topic: str, since: dict[int, int], run_id: str,
                       idle_s: float = 3.0) -> list[chaos.Timed]:
    """Every result record of ``run_id`` from offsets ``since`` up to the end, and on until the topic
    has been quiet for ``idle_s`` (late duplicates count too), each with its record timestamp (ns)."""
    from aiokafka import TopicPartition

    cons = kclient.consumer(settings, group_id=None, enable_auto_commit=False)
    await cons.start()
    out = []
    try:
        tps = [TopicPartition(topic, p) for p in since]
        cons.assign(tps)
        for tp in tps:
            cons.seek(tp, since[tp.partition])
        ends = await cons.end_offsets(tps)
        quiet_since = time.monotonic()
        async def behind() -> bool:
            return any([await cons.position(tp) < ends[tp] for tp in tps])

        while await behind() or time.monotonic() - quiet_since < idle_s:
            batch = await cons.getmany(timeout_ms=300)
            await codec.prefetch(m.value for records in batch.values() for m in records)  # off the loop
            for records in batch.values():
                quiet_since = time.monotonic()
                for m in records:
                    try:
                        r = codec.decode_typed("InferenceResult", m.value)
                    except codec.CodecError:
                        continue
                    if r.request_id.startswith(run_id + "-"):
                        out.append((m.timestamp * 1_000_000, r))
    finally:
        await cons.stop()
    return out


async def busiest_node(settings: KafkaSettings, names: list[str]) -> int:
    """The broker that leads the most partitions of ``names``."""
    from ...streams.admin import admin_client

    async with admin_client(settings) as admin:
        meta = await admin.describe_topics(names)
    leaders = [p["leader"] for t in meta for p in t["partitions"]]
    return max(set(leaders), key=leaders.count)


def drop_topics(settings: KafkaSettings, pipe) -> None:
    """Delete the run's pipeline copy's topics (its results are in the report)."""
    from ...streams import admin

    try:
        asyncio.run(admin.delete_topics(settings, [t.name for t in topics.all_topics(pipe)]))
    except Exception as exc:  # a broker down at the end must not hide the run's own error
        click.echo(f"could not delete the topics of {pipe.name}: {exc}", err=True)


def tear_down(stack, settings: KafkaSettings, pipe, cluster, started: bool) -> int:
    """Stop every process of the run, delete its topics, and stop the broker or cluster if this run
    started it; returns the supervisor's restart count."""
    restarts = stack.restarts
    stack.stop()
    drop_topics(settings, pipe)
    if started and cluster.local is not None:
        broker.cluster_down(cluster.local, progress=click.echo)
    elif started and cluster.single is not None:
        broker.down(cluster.single, progress=click.echo)
    return restarts


def interrupt_on_sigterm() -> None:
    """SIGTERM ends a run like Ctrl-C: the supervisor stops every process it started."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@dataclass
class Injected:
    fault_ns: int | None = None
    note: str = ""
    steps: list[str] = field(default_factory=list)


BUSIEST, CONTROLLER = "busiest", "controller"


def pick_node(choice: str, busiest: int, controller: int | None) -> int:
    """The node a cluster fault kills: ``busiest`` (the leader of most of the pipeline's partitions),
    ``controller`` (the active controller; the busiest when it is not known) or a node number."""
    if choice == BUSIEST:
        return busiest
    if choice == CONTROLLER:
        return controller if controller is not None else busiest
    return int(choice)


def check_node(choice: str, nodes: int | None = None) -> None:
    """Refuse a ``--broker-node`` that is not ``busiest``, ``controller`` or a node number (one of the
    cluster's ``nodes`` when known)."""
    numbered = choice.isdigit() and int(choice) >= 1 and (nodes is None or int(choice) <= nodes)
    if choice not in (BUSIEST, CONTROLLER) and not numbered:
        raise ValueError(f"broker node must be {BUSIEST!r}, {CONTROLLER!r} or 1..{nodes or 'N'}, got {choice!r}")


async def inject(case: chaos.FaultCase, stack: Stack, cluster: Cluster, first_send: asyncio.Event,
                 fault_at_s: float, out: Injected, broker_node: str = BUSIEST) -> None:
    """Wait ``fault_at_s`` after the first send, then do what the case says."""
    if case.action == chaos.NONE:
        return
    await first_send.wait()
    await asyncio.sleep(fault_at_s)
    if case.action in (chaos.KILL, chaos.FREEZE):
        pid = stack.pid(case.target)
        out.fault_ns = time.time_ns()
        if case.action == chaos.KILL:
            os.killpg(pid, signal.SIGKILL)
            out.steps.append(f"SIGKILL {case.target} pid {pid}")
        else:
            os.killpg(pid, signal.SIGSTOP)
            await asyncio.sleep(case.hold_s)
            os.killpg(pid, signal.SIGCONT)
            out.steps.append(f"SIGSTOP {case.target} pid {pid} for {case.hold_s:g} s, then SIGCONT")
        return
    if case.action == chaos.BROKER:
        if cluster.single is None:
            out.note = "skipped: the broker is not the local one"
            return
        pid = broker.running_pid(cluster.single)
        out.fault_ns = time.time_ns()
        os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(case.hold_s)
        t0 = time.monotonic()
        await asyncio.to_thread(broker.up, cluster.single, 120.0, lambda _: None)
        out.steps.append(f"SIGKILL broker pid {pid}; restarted after {case.hold_s:g} s, "
                         f"ready {time.monotonic() - t0:.1f} s later")
        return
    if cluster.local is None:
        out.note = "skipped: needs the local cluster (--brokers 3)"
        return
    controller = await asyncio.to_thread(broker.active_controller, cluster.local)
    busiest = await busiest_node(stack.settings, [t.name for t in topics.all_topics(stack.pipe)])
    node = pick_node(broker_node, busiest, controller)
    pid = broker.running_pid(cluster.local.nodes[node - 1])
    out.fault_ns = time.time_ns()
    os.kill(pid, signal.SIGKILL)
    roles = [r for r, n in (("the active controller", controller), ("leader of most partitions", busiest)) if n == node]
    await asyncio.sleep(case.hold_s)
    t0 = time.monotonic()
    await asyncio.to_thread(broker.start_node, cluster.local, node)
    listed = time.monotonic() - t0
    await asyncio.to_thread(broker.wait_in_sync, cluster.local, node)
    role = ", ".join(roles) or "neither the active controller nor the leader of most partitions"
    out.steps.append(f"SIGKILL broker node {node} ({role}; controller {controller}) pid {pid}; restarted after "
                     f"{case.hold_s:g} s, all brokers listed by every node {listed:.1f} s later, node {node} "
                     f"back in every in-sync replica set {time.monotonic() - t0:.1f} s later")


async def run_case(case: chaos.FaultCase, stack: Stack, cluster: Cluster, arrivals: np.ndarray, payload: bytes,
                   run_id: str, fault_at_s: float, drain_s: float, broker_node: str = BUSIEST):
    """One case: replay with the fault injected; (outcome, sent id -> ns, result records, what was done)."""
    from ..replay import ReplayOptions, ReplayTarget, replay
    from ..schedule import build_schedule

    pipe, settings = stack.pipe, stack.settings
    since = await results_end(settings, topics.results(pipe.name))
    schedule = build_schedule(arrivals, seed=0)
    target = ReplayTarget(pipe.name, pipe.source, pipe.slo_ms, pipe.input_content_type)
    first_send, injected = asyncio.Event(), Injected()

    def progress(sent: int, results: int, total: int) -> None:
        if sent:
            first_send.set()

    fault = asyncio.create_task(inject(case, stack, cluster, first_send, fault_at_s, injected, broker_node))
    outcome = await replay(schedule, target, settings, payload, ReplayOptions(run_id, drain_s=drain_s),
                           progress=progress)
    await fault
    sent = {schedule.request_id(run_id, i): int(t) for i, t in enumerate(outcome.actual_ns) if t > 0}
    records = await read_results(settings, topics.results(pipe.name), since, run_id)
    note = "; ".join(x for x in [injected.note, *injected.steps] if x)
    return chaos.outcome(case, records, sent, injected.fault_ns, pipe.slo_ms, note), sent, records, injected


@dataclass(frozen=True)
class ChaosOptions:
    pipeline_file: str
    trace: str = "poisson:rate=6,duration=40"
    fault_at_s: float = 10.0
    brokers: int = 1
    broker_down_s: float = 5.0
    freeze_s: float = FREEZE_S
    freeze_stage: str | None = None
    only: tuple[str, ...] = ()
    profiles_dir: str = ".state/profiles"
    report_dir: str = "reports/chaos"
    mode: str = "milp"
    replan_s: float = 30.0
    drain_s: float = 90.0
    seed: int = 0
    warmup_s: float = 15.0  # an unscored replay of the trace's first seconds before the first case
    port: int | None = None  # a Kafka of the run's own on this port (started and stopped by it)
    kafka_state: str | None = None  # its state folder [default: .state/kafka or .state/kafka-cluster]
    standby: int = 1  # warm worker processes per worker role beyond the plan's (slipstream.tuner.supervisor)
    broker_node: str = BUSIEST  # the node a cluster fault kills (pick_node)
    controllers: int | None = None  # the cluster's controller-only nodes (broker.local_cluster's default)

    def __post_init__(self) -> None:  # the number against the cluster's nodes once it is known (run_suite)
        check_node(self.broker_node)


def run_suite(opts: ChaosOptions) -> list[chaos.CaseOutcome]:
    """Start (or find) the Kafka, run every selected case on one stack, write the report."""
    from ...planner.profiles import ProfileStore
    from ...streams.spec import load_pipeline
    from ..live.replay_report import example_payload
    from ..live.run import profile_missing
    from ..traces import trace_arrivals

    interrupt_on_sigterm()
    report = Path(opts.report_dir)
    cluster, started = use_cluster(opts.brokers, opts.port, opts.kafka_state, opts.controllers)
    if cluster.local:
        check_node(opts.broker_node, len(cluster.local.nodes))
    previous = export_bootstrap(cluster.bootstrap)  # for the run's processes; put back after it
    settings = KafkaSettings.from_env()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = fresh_pipeline(opts.pipeline_file, report, f"chaos{cluster.brokers}-{int(time.time()) % 100000}")
    pipe = load_pipeline(path)
    store = ProfileStore(opts.profiles_dir)
    profile_missing(pipe, store)
    arrivals = trace_arrivals(opts.trace, opts.seed)
    payload = example_payload(pipe, None)
    freeze_stage = opts.freeze_stage or pipe.source
    cases = chaos.select(chaos.fault_cases([s.name for s in pipe.stages], has_join=pipe.needs_join,
                                           brokers=cluster.brokers, freeze_stage=freeze_stage,
                                           freeze_s=opts.freeze_s, broker_down_s=opts.broker_down_s,
                                           services=services_for(opts.replan_s)), opts.only)
    click.echo(f"chaos: {len(cases)} case(s) on {pipe.name}, {cluster.brokers} broker(s) at {cluster.bootstrap}, "
               f"trace {opts.trace}, fault {opts.fault_at_s:g} s after the first send, {opts.standby} standby "
               f"worker(s) per role")
    stack = Stack(pipe, path, store, settings, report / "logs", mode=opts.mode, sample=arrivals,
                  replan_s=opts.replan_s, standby=opts.standby)
    outcomes = []
    try:
        stack.wait_settled()
        # unscored: the first requests meet cold consumers (first fetches, the planner service's first
        # StageConfigs); the baseline must be the steady state the faults are compared with
        warm = arrivals[arrivals < opts.warmup_s]
        out, *_ = asyncio.run(run_case(chaos.FaultCase("warm-up", chaos.NONE), stack, cluster, warm, payload,
                                       f"warm-{stamp}", opts.fault_at_s, opts.drain_s))
        click.echo(f"warm-up ({opts.warmup_s:g} s, not scored): {out.requests} requests, {out.missing} missing")
        for k, case in enumerate(cases):
            t0 = time.monotonic()  # a case's time includes waiting for the last case's restarts
            stack.wait_settled()
            click.echo(f"\n== case {k + 1}/{len(cases)}: {case.name}")
            run_id = f"c{k:02d}-{stamp}"
            out, sent, records, injected = asyncio.run(run_case(case, stack, cluster, arrivals, payload, run_id,
                                                          opts.fault_at_s, opts.drain_s, opts.broker_node))
            outcomes.append(out)
            (report / "cases").mkdir(parents=True, exist_ok=True)
            (report / "cases" / f"{k:02d}.json").write_text(json.dumps(
                {"name": case.name, "case": asdict(case), "outcome": out.row(), "fault_ns": injected.fault_ns,
                 "sent": sent, "results": [chaos.case_row(*x) for x in records]}) + "\n")
            click.echo(chaos.format_table([out]).splitlines()[-1] + (f"  [{out.note}]" if out.note else "")
                       + f"  ({time.monotonic() - t0:.0f} s)")
    finally:
        restarts = tear_down(stack, settings, pipe, cluster, started)
        export_bootstrap(previous)
    title = (f"slipstream chaos: {pipe.name}, {cluster.brokers} broker(s), {opts.trace}, fault at "
             f"{opts.fault_at_s:g} s, {opts.standby} standby worker(s) per role, {settings.processing}; "
             f"{restarts} process restart(s) by the supervisor")
    text = f"{title}\n\n{chaos.format_table(outcomes)}\n\nnotes:\n" + "\n".join(
        f"- {o.case.name}: {o.note}" for o in outcomes if o.note)
    (report / "chaos.md").write_text(text + "\n")
    (report / "chaos.json").write_text(json.dumps({"title": title, "rows": [o.row() for o in outcomes]}, indent=1))
    chaos.plot_table(outcomes, report / "chaos.png", title)
    chaos.plot_backlogs([json.loads((report / "cases" / f"{k:02d}.json").read_text()) for k in range(len(outcomes))],
                        report / "backlog.png")
    click.echo("\n" + text)
    click.echo(f"report: {report}/chaos.md, chaos.png, backlog.png, cases/*.json; process logs in {report}/logs")
    return outcomes
