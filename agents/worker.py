"""One stage worker: the faust shell around the window planner (``agents.window``).

faust's consumer hands each fetch of the stage's input to :meth:`StageWorker.on_records`
(``agents.intake``), which only appends it to an intake list. The batch loop reads everything that
arrived at once (decodes it; undecodable or oversize records go to the dead-letter topic), hands it to
the :class:`~agents.window.WindowPlanner`, and takes windows when the planner says so (the decision is
``streams.batching``, which the estimator runs too). A window goes to a free model instance
(``agents.instances``: c instances behind one queue) and is worked off on that instance's thread as
``streams.batching`` describes. Then, in one place (:meth:`StageWorker._finish`), its outputs (results,
children's inputs, drops, errors) are produced together, their delivery is awaited, and the window's
input offsets are marked done together, in offset order per partition (``agents.acks``); faust
commits one past each partition's done prefix (:meth:`StageWorker.committable`), so offsets are
committed only past work whose outputs are in Kafka. With ``processing: exactly-once``
(``streams.config``) the same place commits a window's outputs and its input offsets in one Kafka
transaction per input partition (``agents.transactions``), and faust commits nothing.

Replica changes from the control topic are instance changes (``streams.placement``): new instances
load and warm on the loader thread while the others serve and join at a window boundary; removed
ones finish their window. No consumer-group change, so no instance ever pauses for a scale event.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agents import routing
from agents.admission import admit
from agents.acks import AckTracker
from agents.backlog import Backlog, out_bytes
from agents.control import ActiveConfig, accept, defaults
from agents.delivery import Delivery, dead_letter
from agents.executors import check_digest, pinned
from agents.instances import (ExecutorFactory, Fleet, Instance, RunPastDeadline, VariantState, new_instance,
                              run_bounded, run_deadline_s, warmup_curve)
from agents.metrics import StageMetrics, observe_many
from agents.transactions import PartitionTransactions
from agents.window import Item, Take, WindowPlanner, batch_outputs, failed, split_variants, sub_batch
from streams.timeline import mark
from streams import batching, codec, contract, kafka as kclient, placement, topics
from streams.config import KafkaSettings
from streams.executor import Executor
from streams.heartbeat import Heartbeat
from streams.latency import RecentLatency
from streams.limits import Limits, read_limits
from streams.profile_store import ProfileStore, lookup
from streams.spec import Pipeline

log = logging.getLogger(__name__)

# Records read but not yet in a window (intake and queue): above this, the consumer waits before it
# hands over the next fetch (``agents.intake``), as faust's stream buffer (4,096) made it wait.
MAX_QUEUED = 4096
# A window's outputs are sent in one burst; the linger only has to cover the burst, and a producer
# batch (per partition) holds a whole window of small records, so a window is one produce request per
# partition instead of one per 16 KiB (aiokafka's default batch).
WINDOW_LINGER_MS = 1
WINDOW_BATCH_BYTES = 1024 * 1024
# Record limits are the topics' own (``streams.limits``, read at start): an output over its topic's
# limit is refused before sending and becomes an error result (``agents.delivery``). Refused by the
# broker instead, it would fail an idempotent producer's batch and every later batch of that partition
# (OutOfOrderSequenceNumber stops aiokafka's sender).
__all__ = ["ExecutorFactory", "StageWorker", "check_all", "check_and_run"]


class StageWorker:
    def __init__(self, pipe: Pipeline, stage: str, kafka: KafkaSettings, factory: ExecutorFactory,
                 metrics: StageMetrics | None = None, worker_id: str | None = None,
                 warmup_batches: tuple[int, ...] = (), max_instances: int | None = None,
                 profiles: ProfileStore | None = None) -> None:
        self.pipe, self.stage, self.kafka, self.factory = pipe, stage, kafka, factory
        self.spec = pipe.stage(stage)
        self.metrics = metrics or StageMetrics.create(pipe.name, stage)
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.max_instances = placement.instance_cap(max_instances, placement.cgroup_cpu_limit())
        self.profiles = profiles  # the planner's profile store: predictors start from its numbers
        self.config: ActiveConfig = defaults(pipe, stage)
        self.fleet = Fleet()
        self._pending: tuple[ActiveConfig, Fleet] | None = None
        self._intake: list = []  # (tp, records, received_ns) per fetch since the batch loop last looked
        self._intake_n = 0  # records on it
        self.room = asyncio.Event()  # set while fewer than MAX_QUEUED records wait (agents.intake)
        self.room.set()
        self.planner = WindowPlanner()
        self._wake = asyncio.Event()  # an arrival, a free instance or a new config
        # loads and warm-ups of new instances run beside serving, so no batch waits on a load
        self.loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"load-{stage}")
        self.producer = None
        self.warmup_batches = warmup_batches
        self.started = asyncio.Event()
        self.acks = AckTracker()
        self.heartbeat = Heartbeat()  # liveness (``/healthz``): the loop's ticks, model runs' deadlines
        self.run_deadline_s = run_deadline_s(pipe.slo_ms)
        self._inflight: set[asyncio.Future] = set()  # windows (and dead letters) being delivered and acked
        self.backlog = Backlog()  # of those awaiting delivery: while full, no new window and no fetch
        # exactly-once: one transactional producer per assigned input partition (opened on assignment)
        self.txns = PartitionTransactions(
            kafka, topics.consumer_group(pipe.name, stage), pipe, stage, self._delivery_failed,
            linger_ms=WINDOW_LINGER_MS, max_batch_size=WINDOW_BATCH_BYTES) if kafka.exactly_once else None
        self.limits = Limits()  # the broker default until read from the cluster (:meth:`start`)
        self.bounds = self._bounds()  # the data contract's (streams.contract), again once the limits are read

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.metrics.lab(self.metrics.config_epoch).set(self.config.epoch)
        self.fleet = await self._prepare(self.config, Fleet())
        self._set_instance_gauge()
        mark("model-loaded", instances=len(self.fleet.instances))
        self.limits = await read_limits(self.kafka, [t.name for t in topics.all_topics(self.pipe)])
        self.bounds = self._bounds()
        if self.txns is None:
            self.producer = kclient.producer(self.kafka, linger_ms=WINDOW_LINGER_MS, max_batch_size=WINDOW_BATCH_BYTES,
                                             max_request_size=self.limits.largest())
            await self.producer.start()
            self.delivery = Delivery(self.producer, self.pipe, self.stage, self._delivery_failed, limits=self.limits)
        else:
            self.txns.limits, self.txns.overrides["max_request_size"] = self.limits, self.limits.largest()
        self.started.set()

    def _bounds(self) -> contract.Bounds:
        return contract.Bounds.of(self.pipe, self.stage, self.limits.of(topics.stage_input(self.pipe.name, self.stage)))

    def _delivery_failed(self, kind: str) -> None:
        self.metrics.lab(self.metrics.delivery_failures, outcome=kind).inc()

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.drain(), 10)
        except Exception:  # shutting down: whatever is unacked will be redelivered
            pass
        if self.producer is not None:
            await self.producer.stop()
        if self.txns is not None:
            await self.txns.close_all()
        self.loader.shutdown(wait=True)
        pending = self._pending[1].instances if self._pending else []
        for inst in {id(i): i for i in [*self.fleet.instances, *pending]}.values():
            inst.retire()

    def instances_for(self, cfg: ActiveConfig) -> int:
        return placement.layout(cfg.replicas, self.max_instances).instances

    async def _prepare(self, cfg: ActiveConfig, current: Fleet) -> Fleet:
        """The fleet for ``cfg``: ``current``'s instances when they run the same variants on the same
        hardware (a pure replica change), plus new ones loaded and warmed off the event loop."""
        loop = asyncio.get_running_loop()
        hw = self.pipe.hardware[cfg.hardware]
        variants = [self.spec.variant(n) for n in cfg.variants]
        same = bool(current.instances) and set(current.variants) == set(cfg.variants) and \
            cfg.hardware == current.hardware
        keep = current.instances[:self.instances_for(cfg)] if same else []
        for name, ex in (kv for inst in keep for kv in inst.executors.items()):  # kept copies too
            check_digest(ex, cfg.digests.get(name, ""), "the StageConfig")
        factory = pinned(self.factory, cfg.digests)
        fleet = Fleet(list(keep), dict(current.variants) if same else {}, cfg.hardware)
        load_ns = warm_ns = 0
        while len(fleet.instances) < self.instances_for(cfg):
            t0 = time.time_ns()
            inst = await loop.run_in_executor(self.loader, new_instance, factory, variants, hw,
                                              self.stage, len(fleet.instances))
            t1 = time.time_ns()
            sizes = self.warmup_batches or (1, cfg.max_batch)
            for v in variants:  # warm every copy; without a profile the first warm-up seeds the predictor
                curve = await loop.run_in_executor(self.loader, warmup_curve, inst.executors[v.name], sizes)
                if v.name not in fleet.variants:
                    profile = lookup(self.profiles, v, cfg.hardware) if self.profiles is not None else None
                    seed = profile.curve() if profile is not None else curve
                    fleet.variants[v.name] = VariantState(v.accuracy, RecentLatency(seed))
            fleet.instances.append(inst)
            load_ns, warm_ns = load_ns + t1 - t0, warm_ns + time.time_ns() - t1
        if cfg.epoch >= 0:
            mark("config-loaded", epoch=cfg.epoch, instances=len(fleet.instances),
                 new=len(fleet.instances) - len(keep), load_ms=f"{load_ns / 1e6:.1f}",
                 warm_ms=f"{warm_ns / 1e6:.1f}")
        return fleet

    # ------------------------------------------------------------------ reading

    def on_records(self, tp: Any, records: list) -> None:
        """One partition's records of one fetch (``agents.intake``: faust's consumer hands them over
        in one call): only put them on the intake list. Decoding, checks, metrics and the ack tracker
        work on everything read so far at once (:meth:`_read_intake`)."""
        self._intake.append((tp, records, time.time_ns()))
        self._intake_n += len(records)
        self._update_room()
        if not self._wake.is_set():
            self._wake.set()

    def _update_room(self) -> None:
        if self._intake_n + len(self.planner) < MAX_QUEUED and not self.backlog.full():
            self.room.set()
        else:
            self.room.clear()

    def committable(self, tp: Any) -> int | None:
        """The offset faust commits for ``tp`` (``agents.intake``): one past the done prefix; None
        with exactly-once, where each window's transaction commits its offsets."""
        return None if self.txns is not None else self.acks.committable({tp}).get(tp)

    def _read_intake(self) -> None:
        """Admit every record read since the last call (``agents.admission``): valid requests onto the
        window planner's queue; requests that break the contract answered with an error result;
        undecodable or oversize records, and those that cannot be answered, to the dead-letter topic."""
        if not self._intake:
            return
        fetches, self._intake, self._intake_n = self._intake, [], 0
        for tp, records, _ in fetches:
            self.acks.read_many(tp, records)
        got = admit(self.pipe, fetches, self.bounds, time.time_ns())
        if got.items:
            self.metrics.lab(self.metrics.requests).inc(len(got.items))
            self.planner.add(got.items)
            self.metrics.lab(self.metrics.queue_depth).set(len(self.planner))
        if got.refused:
            log.warning("refused %d request(s): %s", len(got.refused),
                        "; ".join(f"{it.req['request_id']}: {out.value['reason']}" for it, out in got.refused[:5]))
            self.metrics.lab(self.metrics.results, status="error").inc(len(got.refused))
            self._track(self._finish([it for it, _ in got.refused], [([out], it) for it, out in got.refused]))
        if got.dead:
            self._track(self._dead_letters(got.dead))

    async def _dead_letters(self, bad: list[tuple[Any, Any, str]]) -> None:
        entries = []
        for tp, m, error in bad:
            log.warning("dead letter %s[%d]@%d: %s", m.topic, m.partition, m.offset, error)
            out = dead_letter(self.pipe, self.stage, self.limits, m.value, m.topic, m.partition, m.offset, error)
            entries.append((tp, m.offset, [(out, None)]))
        self.metrics.lab(self.metrics.dead_letters).inc(len(bad))
        await self._deliver(entries)

    async def on_revoked(self, revoked: set, commit_offsets) -> None:
        """Before partitions move: forget read and queued (unprocessed, unacked) items of the revoked
        ones (Kafka redelivers them to their new owner), let the windows in progress finish, wait until
        every processed window is delivered and acked, and commit their offsets, so the new owner starts
        right after the work done here (see ``agents.acks`` for why faust's own commit cannot)."""
        mark("revoked", partitions=len(revoked))
        self._intake = [f for f in self._intake if f[0] not in revoked]
        self._intake_n = sum(len(f[1]) for f in self._intake)
        self.planner.forget(revoked)
        self._update_room()
        await self.drain()
        offsets = self.acks.committable(revoked)
        if self.txns is not None:  # the offsets are committed already, each in its window's transaction
            await self.txns.close(revoked)
        elif offsets:
            await commit_offsets(offsets)
        left = self.acks.forget(revoked)
        mark("revoke-done")
        log.info("revoked %d partition(s): committed %s; %d unfinished items left to their new owner",
                 len(revoked), {f"{tp.topic}[{tp.partition}]": o for tp, o in offsets.items()}, left)

    async def on_assigned(self, assigned: set) -> None:
        """After a rebalance, before faust seeks the partitions to their committed offsets: start the
        transactional producers of newly assigned partitions, fencing their previous owners."""
        if self.txns is not None:
            await self.txns.open(assigned)

    # ------------------------------------------------------------------ control

    async def offer_config(self, rec: dict) -> bool:
        """A StageConfig from the control topic: accept (and prepare its instances) or reject."""
        current_cfg, current = self._pending if self._pending else (self.config, self.fleet)
        cfg, why = accept(self.pipe, self.stage, rec, current_cfg)
        if cfg is None:
            if rec.get("pipeline") == self.pipe.name and rec.get("stage") == self.stage:
                log.warning("control record rejected: %s", why)
                self.metrics.lab(self.metrics.config_rejected).inc()
            return False
        try:
            fleet = await self._prepare(cfg, current)  # load before switching: no request waits on a load
        except Exception as exc:  # a model that cannot load is a bad config, not a dead worker
            log.error("control record epoch %d rejected: cannot load %s: %s", cfg.epoch, cfg.variants, exc)
            self.metrics.lab(self.metrics.config_rejected).inc()
            return False
        if self._pending is not None:  # superseded before it took effect: close what only it held
            self._retire_unused(self._pending[1], fleet, self.fleet)
        self._pending = (cfg, fleet)
        self._wake.set()
        return True

    def _apply_pending_config(self) -> None:
        if self._pending is None:
            return
        (cfg, fleet), old = self._pending, self.fleet
        self._pending = None
        self.config, self.fleet = cfg, fleet
        self._retire_unused(old, fleet)
        self._set_instance_gauge()
        self.metrics.lab(self.metrics.config_epoch).set(cfg.epoch)
        log.info("config epoch %d in force: %s; %d instance(s)", cfg.epoch, cfg, len(fleet.instances))
        mark("config-in-force", epoch=cfg.epoch, instances=len(fleet.instances))

    @staticmethod
    def _retire_unused(old: Fleet, *kept: Fleet) -> None:
        keep = {id(i) for f in kept for i in f.instances}
        for inst in old.instances:
            if id(inst) not in keep:
                inst.retire()

    def _set_instance_gauge(self) -> None:
        self.metrics.observe_fleet(self.fleet)

    # ------------------------------------------------------------------ windows

    async def run_batches(self) -> None:
        """The shell around :class:`agents.window.WindowPlanner`: read what arrived, apply a pending
        config (a window boundary), take a window when the planner says so, else sleep until it is due
        or something changes (an arrival, a free instance, a config)."""
        while True:
            if self._intake:  # writer schemas the registry must give: looked up off the event loop
                await codec.prefetch(r.value for _, records, _ in self._intake for r in records)
            self._read_intake()
            self._apply_pending_config()  # window boundary
            s = batching.BatchSettings.from_ms(self.config.max_batch, self.config.batch_timeout_ms)
            inst = self.fleet.idle() if not self.backlog.full() else None  # back-pressure from delivery
            step = self.planner.poll(time.time_ns(), s, inst is not None)
            if isinstance(step, Take):
                self.metrics.lab(self.metrics.queue_depth).set(len(self.planner))
                self._update_room()
                inst.busy = True
                self._track(self._window(inst, step.items, s))
                continue
            self._wake.clear()
            if self._intake:
                continue
            if step.until_ns is None:
                await self._wake.wait()
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), max(step.until_ns - time.time_ns(), 0) / 1e9)
            except TimeoutError:
                pass

    def _track(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._inflight.add(task)
        task.add_done_callback(self._window_done)

    def _window_done(self, task: asyncio.Future) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("window failed: %r", task.exception(), exc_info=task.exception())

    async def _window(self, inst: Instance, window: list[Item], s: batching.BatchSettings) -> None:
        """Work one window off on ``inst``, free the instance, then produce its outputs and ack it.
        Every item is answered whatever fails (:meth:`answer`), so the worker keeps acking and committing."""
        try:
            answers = await self.answer(inst, window, s)
        finally:
            inst.release()
            self._wake.set()
        await self._finish(window, answers)

    async def answer(self, inst: Instance, window: list[Item], s: batching.BatchSettings) -> list:
        """(records, item) for every item of ``window``. A window that fails (a bug: model errors
        and contract breaches are error results already) keeps what it answered; the rest are served
        again one by one, so only the item that fails alone ends as an error (``agents.window.failed``)."""
        answers: list[tuple[list[routing.Out], Item]] = []
        try:
            await self.work_off(inst, self.fleet.variants, window, s, answers)
            return answers
        except Exception:
            log.exception("window of %d failed: serving its unanswered items one by one", len(window))
        answered = {id(it) for _, it in answers}
        for it in [it for it in window if id(it) not in answered]:
            one: list = []
            try:
                await self.work_off(inst, self.fleet.variants, [it], s, one)
            except Exception as exc:
                log.exception("request %s failed alone: error result", it.req.get("request_id"))
                one = one or [(failed(self.pipe, self.stage, it, f"{self.stage}: internal error: {exc!r}",
                                      time.time_ns()), it)]
            answers += one
        return answers

    async def _finish(self, window: list[Item], answers: list[tuple[list[routing.Out], Item]]) -> None:
        """Produce a window's outputs together, await their delivery, then ack its input offsets
        together (in offset order per partition): the one place a window's "produce + commit" happens,
        so it can become one Kafka transaction."""
        self.metrics.observe_outputs([o for outs, _ in answers for o in outs])  # results: latency, SLO
        per_input: dict[int, list] = {id(it): [] for it in window}
        for outs, it in answers:
            per_input[id(it)] += [(o, it) for o in outs]
        await self._deliver([(it.tp, it.offset, per_input[id(it)]) for it in window])

    async def _deliver(self, entries: list[tuple[Any, int, list]]) -> None:
        """Deliver each input's outputs ((out, item) pairs) and ack the inputs: at least once (every
        output in Kafka, then the acks), or exactly once (outputs and offsets in one transaction per
        partition, in offset order; ``agents.transactions``), counted in the backlog meanwhile."""
        held = self.backlog.add(out_bytes(o for _, _, rs in entries for o, _ in rs))
        self.metrics.lab(self.metrics.backlog).set(self.backlog.windows)
        self._update_room()
        try:
            await self._deliver_and_ack(entries)
        finally:
            self.backlog.done(held)
            self.metrics.lab(self.metrics.backlog).set(self.backlog.windows)
            self._update_room()
            self._wake.set()

    async def _deliver_and_ack(self, entries: list[tuple[Any, int, list]]) -> None:
        if self.txns is None:  # faust commits the done prefix (``agents.intake``, :meth:`committable`)
            owner = [k for k, (_, _, rs) in enumerate(entries) for _ in rs]
            lost = {owner[i] for i in await self.delivery.settle(
                await self.delivery.send_all([r for _, _, rs in entries for r in rs]))}
            if lost:  # not acked: read again after the restart that failing liveness brings
                self.heartbeat.fail(f"{len(lost)} input(s) neither delivered nor replaced: left unacked")
            self.acks.done_many([(tp, off) for k, (tp, off, _) in enumerate(entries) if k not in lost])
            return
        for tp, off, rs in entries:
            self.acks.attach(tp, off, rs)
        await self.txns.commit(self.acks.release([(tp, off) for tp, off, _ in entries]))

    async def work_off(self, inst: Instance, variants: dict[str, VariantState], window: list[Item],
                       s: batching.BatchSettings, answers: list) -> None:
        """Run one window on ``inst``, adding (records, item) to ``answers`` (kept when it fails)."""
        groups, floor = split_variants(window, self.config, {n: vs.accuracy for n, vs in variants.items()})
        if floor:
            now = time.time_ns()
            answers += [([routing.ended(self.pipe, it.req, "dropped", why, now)], it) for it, why in floor]
            self.metrics.lab(self.metrics.drops, reason="accuracy-floor").inc(len(floor))
        for variant, pending in groups.items():
            vs = variants[variant]
            while pending:
                if inst.hung:  # the rest of the window cannot run on it
                    answers += [([routing.ended(self.pipe, it.req, "error", inst.hung, time.time_ns())], it)
                                for it in pending]
                    break
                now = time.time_ns()
                step = sub_batch(pending, now, vs.predictor.predict_ns, s)
                if step.dropped:
                    answers += [([routing.ended(self.pipe, it.req, "dropped", why, now)], it)
                                for it, why in step.dropped]
                    self.metrics.lab(self.metrics.drops, reason="deadline").inc(len(step.dropped))
                if step.run:
                    answers += await self._run(inst, variant, vs, step.run)
                pending = step.deferred

    def _hung(self, inst: Instance, why: str) -> None:
        """A run past its deadline: the instance takes no more work (its thread cannot be stopped;
        the heartbeat keeps failing until a restart frees it) and a new one is loaded in its place."""
        log.error("%s; loading a new instance", why)
        inst.hung = why
        inst.retire()  # closed when its window ends
        if inst in self.fleet.instances:
            self.fleet.instances.remove(inst)
        self._set_instance_gauge()
        task = asyncio.ensure_future(self._replace_instances(self.config))  # not a window: drain skips it
        task.add_done_callback(self._window_done)

    async def _replace_instances(self, cfg: ActiveConfig) -> None:
        fleet = await self._prepare(cfg, self.fleet)
        if self.config is cfg and self._pending is None:
            self._pending = (cfg, fleet)
            self._wake.set()
        else:  # a new config came meanwhile, with instances of its own
            self._retire_unused(fleet, self.fleet, *([self._pending[1]] if self._pending else []))

    async def drain(self) -> None:
        """Wait until every window taken so far has been delivered and acked."""
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    async def _run(self, inst: Instance, variant: str, vs: VariantState, batch: list[Item]
                   ) -> list[tuple[list[routing.Out], Item]]:
        """One hand-off to the model thread: the executor's input checks (they decode: images take
        milliseconds), then the model on the items that passed."""
        started = time.time_ns()
        observe_many(self.metrics.lab(self.metrics.queueing), [(started - it.arrival_ns) / 1e9 for it in batch])
        try:
            bad, outs = await run_bounded(inst, self.heartbeat, self.run_deadline_s,
                                          f"model run {self.stage}/{variant} of {len(batch)} on instance {inst.index}",
                                          check_and_run, inst.executors[variant], [it.req["payload"] for it in batch])
            error = None
        except RunPastDeadline as exc:  # its requests get error results; a new instance takes its place
            bad, outs, error = [None] * len(batch), None, str(exc)
            self._hung(inst, error)
        except Exception as exc:  # a model error fails this batch, not the worker
            log.exception("model %s failed on a batch of %d", variant, len(batch))
            bad, outs = [None] * len(batch), None
            error = f"model error in {self.stage}/{variant}: {type(exc).__name__}: {exc}"
        finished = time.time_ns()
        good = [it for it, why in zip(batch, bad) if why is None]
        answers = [([routing.ended(self.pipe, it.req, "error", f"{contract.BAD_INPUT_PREFIX}{why}", finished)], it)
                   for it, why in zip(batch, bad) if why is not None]
        if answers:
            self.metrics.lab(self.metrics.results, status="error").inc(len(answers))
        if good:
            if not inst.hung:  # a hung run's time says nothing of the model's
                vs.predictor.observe(len(good), finished - started)
            self.metrics.lab(self.metrics.batch_size, variant=variant).observe(len(good))
            self.metrics.lab(self.metrics.inference, variant=variant).observe((finished - started) / 1e9)
            records = batch_outputs(self.pipe, self.stage, variant, vs.accuracy, good, outs, error, started,
                                    finished, f"{self.worker_id}/{inst.index}", inst.executors[variant].digest)
            self.metrics.lab(self.metrics.results, status="error" if error else "done").inc(len(good))
            answers += zip(records, good)
        return answers


def check_all(ex: Executor, payloads: list[bytes]) -> list[str | None]:
    """The executor's per-item input check (None = fine) for each payload; executors without one
    accept everything."""
    check = getattr(ex, "check", None)
    return [check(p) for p in payloads] if check is not None else [None] * len(payloads)


def check_and_run(ex: Executor, payloads: list[bytes]) -> tuple[list[str | None], list]:
    """On the model thread, in one hand-off: each payload's check (``check_all``), then the model on
    the payloads that passed; (the reasons, None for the good ones; the good ones' outputs, in order).
    When the model fails on the batch, each item runs alone and an item that fails alone gets a
    reason; a single item that fails (or a model returning a wrong number of outputs) raises."""
    bad = check_all(ex, payloads)
    good = [i for i, why in enumerate(bad) if why is None]
    try:
        return bad, _run_checked(ex, [payloads[i] for i in good])
    except Exception:
        if len(good) < 2:
            raise
    outs = []  # the batch failed: each item alone, so only the one that fails alone is an error
    for i in good:
        try:
            outs += _run_checked(ex, [payloads[i]])
        except Exception as exc:
            bad[i] = f"the model fails on this item alone: {type(exc).__name__}: {exc}"[:2000]
    return bad, outs


def _run_checked(ex: Executor, payloads: list[bytes]) -> list:
    outs = ex.run(payloads) if payloads else []
    if len(outs) != len(payloads):
        raise RuntimeError(f"{getattr(ex, 'variant', 'model')} returned {len(outs)} outputs for {len(payloads)} inputs")
    return outs
