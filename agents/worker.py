"""One stage worker: the Faust agent body, its batch loop, and its control-topic follower.

The agent only reads: each event is decoded (undecodable or oversize records go to the dead-letter
topic), stamped with its arrival time and put on this worker's FIFO queue. The batch loop takes
windows and works them off exactly as ``streams.batching`` describes (the estimator runs the same
steps), running the model off the event loop on one thread (one execution at a time, Clockwork).
Every output of a window (results, children's inputs, drops, errors) is produced and its delivery
awaited before the window's input events are acked, so offsets are committed only past work whose
outputs are in Kafka (at-least-once; the join and the results reader dedupe by request id and path).
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from agents import routing
from agents.acks import AckTracker
from agents.control import ActiveConfig, accept, choose_variant, defaults
from agents.metrics import StageMetrics
from streams import batching, codec, kafka as kclient
from streams.codec import CodecError
from streams.config import KafkaSettings
from streams.executor import Executor
from streams.latency import LatencyCurve, RecentLatency
from streams.spec import Hardware, Pipeline, Variant

log = logging.getLogger(__name__)

ExecutorFactory = Callable[[Variant, Hardware], Executor]
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024


@dataclass
class Item:
    event: Any  # the faust event, acked when the window is done
    req: dict
    arrival_ns: int
    tp: Any


@dataclass
class Loaded:
    """A variant ready to serve: its executor and its latency predictor."""

    executor: Executor
    predictor: RecentLatency
    accuracy: float


class StageWorker:
    def __init__(self, pipe: Pipeline, stage: str, kafka: KafkaSettings, factory: ExecutorFactory,
                 metrics: StageMetrics | None = None, worker_id: str | None = None,
                 warmup_batches: tuple[int, ...] = ()) -> None:
        self.pipe, self.stage, self.kafka, self.factory = pipe, stage, kafka, factory
        self.spec = pipe.stage(stage)
        self.metrics = metrics or StageMetrics.create(pipe.name, stage)
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.config: ActiveConfig = defaults(pipe, stage)
        self._pending_config: tuple[ActiveConfig, dict[str, Loaded]] | None = None
        self.loaded: dict[str, Loaded] = {}
        self.queue: deque[Item] = deque()
        self.queue_changed = asyncio.Event()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"model-{stage}")
        # loads and warm-ups of a new variant run beside serving, so no batch waits on a load
        self.loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"load-{stage}")
        self.producer = None
        self.stream = None
        self.warmup_batches = warmup_batches
        self.started = asyncio.Event()
        self.window_lock = asyncio.Lock()  # held while a window is worked off
        self.acks = AckTracker()
        self._finishing: asyncio.Future | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.metrics.lab(self.metrics.config_epoch).set(self.config.epoch)
        self.loaded = await self._load(self.config)
        self.producer = kclient.producer(self.kafka)
        await self.producer.start()
        self.started.set()

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.drain(), 10)
        except Exception:  # shutting down: whatever is unacked will be redelivered
            pass
        if self.producer is not None:
            await self.producer.stop()
        self.pool.shutdown(wait=True)
        self.loader.shutdown(wait=True)
        for lv in self.loaded.values():
            lv.executor.close()

    async def _load(self, cfg: ActiveConfig) -> dict[str, Loaded]:
        """Load (off the event loop) every variant ``cfg`` routes to, reusing loaded ones, and seed
        each predictor from a warm-up at batch 1 and the max batch."""
        out: dict[str, Loaded] = {}
        loop = asyncio.get_running_loop()
        hw = self.pipe.hardware[cfg.hardware]
        for name in cfg.variants:
            if name in self.loaded and cfg.hardware == self.config.hardware:
                out[name] = self.loaded[name]
                continue
            variant = self.spec.variant(name)
            ex = await loop.run_in_executor(self.loader, self.factory, variant, hw)
            curve = await loop.run_in_executor(self.loader, warmup_curve, ex,
                                               self.warmup_batches or (1, cfg.max_batch))
            out[name] = Loaded(ex, RecentLatency(curve), variant.accuracy)
        return out

    # ------------------------------------------------------------------ reading

    async def on_event(self, event: Any) -> None:
        """Decode one event onto the queue, or dead-letter it."""
        msg = event.message
        data = event.value
        self.acks.read(msg.tp, msg.offset, event)
        try:
            if data is not None and len(data) > MAX_PAYLOAD_BYTES:
                raise CodecError(f"oversize record: {len(data)} bytes > {MAX_PAYLOAD_BYTES}")
            req = codec.decode("InferenceRequest", data)
            if req["pipeline"] != self.pipe.name:
                raise CodecError(f"request for pipeline {req['pipeline']!r} on {self.pipe.name!r}'s topic")
        except CodecError as exc:
            await self.dead_letter(data, msg.topic, msg.partition, msg.offset, str(exc))
            await self._ack_done(msg.tp, msg.offset)
            return
        self.metrics.lab(self.metrics.requests).inc()
        self.queue.append(Item(event, req, time.time_ns(), msg.tp))
        self.metrics.lab(self.metrics.queue_depth).set(len(self.queue))
        self.queue_changed.set()

    async def dead_letter(self, data: bytes | None, topic: str, partition: int, offset: int,
                          error: str) -> None:
        log.warning("dead letter %s[%d]@%d: %s", topic, partition, offset, error)
        self.metrics.lab(self.metrics.dead_letters).inc()
        (fut,) = await self._send([routing.dead_letter(self.pipe, self.stage, data, topic, partition, offset,
                                                       error, time.time_ns())])
        await fut

    async def on_revoked(self, revoked: set, commit_offsets) -> None:
        """Before partitions move: forget queued (unprocessed, unacked) items of the revoked ones (Kafka
        redelivers them to their new owner), let the window in progress finish, wait until every
        processed window is delivered and acked, and commit their offsets, so the new owner starts
        right after the work done here (see ``agents.acks`` for why faust's own commit cannot)."""
        self.queue = deque(i for i in self.queue if i.tp not in revoked)
        async with self.window_lock:
            await self.drain()
        offsets = self.acks.committable(revoked)
        if offsets:
            await commit_offsets(offsets)
        left = self.acks.forget(revoked)
        log.info("revoked %d partition(s): committed %s; %d unfinished items left to their new owner",
                 len(revoked), {f"{tp.topic}[{tp.partition}]": o for tp, o in offsets.items()}, left)

    # ------------------------------------------------------------------ control

    async def offer_config(self, rec: dict) -> bool:
        """A StageConfig from the control topic: accept (and pre-load its variants) or reject."""
        current = self._pending_config[0] if self._pending_config else self.config
        cfg, why = accept(self.pipe, self.stage, rec, current)
        if cfg is None:
            if rec.get("pipeline") == self.pipe.name and rec.get("stage") == self.stage:
                log.warning("control record rejected: %s", why)
                self.metrics.lab(self.metrics.config_rejected).inc()
            return False
        try:
            loaded = await self._load(cfg)  # load before switching: no request waits on a load
        except Exception as exc:  # a model that cannot load is a bad config, not a dead worker
            log.error("control record epoch %d rejected: cannot load %s: %s", cfg.epoch, cfg.variants, exc)
            self.metrics.lab(self.metrics.config_rejected).inc()
            return False
        self._pending_config = (cfg, loaded)
        self.queue_changed.set()
        return True

    def _apply_pending_config(self) -> None:
        if self._pending_config is None:
            return
        cfg, loaded = self._pending_config
        self._pending_config = None
        for name, lv in self.loaded.items():
            if loaded.get(name) is not lv:
                lv.executor.close()
        self.config, self.loaded = cfg, loaded
        self.metrics.lab(self.metrics.config_epoch).set(cfg.epoch)
        log.info("config epoch %d in force: %s", cfg.epoch, cfg)

    # ------------------------------------------------------------------ batching

    async def run_batches(self) -> None:
        while True:
            if not self.queue:
                self.queue_changed.clear()
                await self.queue_changed.wait()
                continue
            self._apply_pending_config()  # batch boundary
            s = batching.BatchSettings.from_ms(self.config.max_batch, self.config.batch_timeout_ms)
            now = time.time_ns()
            if not batching.ready(len(self.queue), self.queue[0].arrival_ns, now, s):
                self.queue_changed.clear()
                due = batching.flush_due_ns(self.queue[0].arrival_ns, s)
                try:
                    await asyncio.wait_for(self.queue_changed.wait(), max(due - now, 0) / 1e9)
                except TimeoutError:
                    pass
                continue
            async with self.window_lock:
                window = [self.queue.popleft() for _ in range(batching.window_size(len(self.queue), s))]
                self.metrics.lab(self.metrics.queue_depth).set(len(self.queue))
                await self.work_off(window, s)

    async def work_off(self, window: list[Item], s: batching.BatchSettings) -> None:
        """Run one window; its outputs' delivery and the acks of its inputs finish in the background,
        in window order, so the next window starts without waiting for a Kafka round trip."""
        futures: list = []
        groups: dict[str, list[Item]] = {}
        accuracy = {n: lv.accuracy for n, lv in self.loaded.items()}
        for it in window:
            variant, why = choose_variant(it.req["request_id"], it.req.get("accuracy_floor"), self.config,
                                          accuracy)
            if variant is None:
                futures += await self._send([routing.ended(self.pipe, it.req, "dropped", why, time.time_ns())])
                self.metrics.lab(self.metrics.drops, reason="accuracy-floor").inc()
                continue
            groups.setdefault(variant, []).append(it)
        loop = asyncio.get_running_loop()
        for variant, items in list(groups.items()):
            # input checks decode (images: milliseconds), so they run on the model thread, not the loop
            bad = await loop.run_in_executor(self.pool, check_all, self.loaded[variant].executor,
                                             [it.req["payload"] for it in items])
            for it, why in zip(items, bad):
                if why:
                    futures += await self._send([routing.ended(self.pipe, it.req, "error", f"bad input: {why}",
                                                               time.time_ns())])
                    self.metrics.lab(self.metrics.results, status="error").inc()
            groups[variant] = [it for it, why in zip(items, bad) if not why]
        for variant, items in groups.items():
            if items:
                futures += await self._work_variant(variant, items, s)
        previous = self._finishing
        self._finishing = asyncio.ensure_future(self._finish(window, futures, previous))

    async def _finish(self, window: list[Item], futures: list, previous: asyncio.Future | None) -> None:
        """Await delivery of a window's outputs, then ack its inputs (after the previous window's)."""
        if futures:
            await asyncio.gather(*futures)
        if previous is not None:
            await previous
        for it in window:
            await self._ack_done(it.tp, it.event.message.offset)

    async def _ack_done(self, tp: Any, offset: int) -> None:
        for event in self.acks.done(tp, offset):
            await self.stream.ack(event)

    async def drain(self) -> None:
        """Wait until every window taken so far has been delivered and acked."""
        if self._finishing is not None:
            await self._finishing

    async def _work_variant(self, variant: str, pending: list[Item], s: batching.BatchSettings) -> list:
        lv = self.loaded[variant]
        loop = asyncio.get_running_loop()
        futures: list = []
        while pending:
            now = time.time_ns()
            d = batching.decide([it.req["deadline_ns"] for it in pending], now, lv.predictor.predict_ns, s)
            for i in d.drop:
                it = pending[i]
                reason = batching.drop_reason(it.req["deadline_ns"], now, lv.predictor.predict_ns(1))
                futures += await self._send([routing.ended(self.pipe, it.req, "dropped", reason, now)])
                self.metrics.lab(self.metrics.drops, reason="deadline").inc()
            if d.run:
                batch = [pending[i] for i in d.run]
                futures += await self._run(variant, lv, batch, loop)
            pending = [pending[i] for i in d.defer]
        return futures

    async def _run(self, variant: str, lv: Loaded, batch: list[Item], loop) -> list:
        started = time.time_ns()
        for it in batch:
            self.metrics.lab(self.metrics.queueing).observe((started - it.arrival_ns) / 1e9)
        try:
            outs = await loop.run_in_executor(self.pool, lv.executor.run, [it.req["payload"] for it in batch])
            if len(outs) != len(batch):
                raise RuntimeError(f"{variant} returned {len(outs)} outputs for {len(batch)} inputs")
            error = None
        except Exception as exc:  # a model error fails this batch, not the worker
            log.exception("model %s failed on a batch of %d", variant, len(batch))
            outs, error = None, f"model error in {self.stage}/{variant}: {type(exc).__name__}: {exc}"
        finished = time.time_ns()
        lv.predictor.observe(len(batch), finished - started)
        self.metrics.lab(self.metrics.batch_size, variant=variant).observe(len(batch))
        self.metrics.lab(self.metrics.inference, variant=variant, batch_size=str(len(batch))).observe(
            (finished - started) / 1e9)
        records = []
        for k, it in enumerate(batch):
            h = routing.hop(self.stage, variant, len(batch), routing.enqueued_ns(it.req), started,
                            finished, self.worker_id)
            if error:
                records.append(routing.ended(self.pipe, it.req, "error", error, finished, h))
                continue
            try:
                records += routing.forward(self.pipe, self.stage, it.req, outs[k], h, lv.accuracy)
            except ValueError as exc:
                records.append(routing.ended(self.pipe, it.req, "error", str(exc), finished, h))
        self.metrics.lab(self.metrics.results, status="error" if error else "done").inc(len(batch))
        return await self._send(records)

    async def _send(self, records: list[routing.Out]) -> list:
        return [await kclient.send(self.producer, r.topic, r.record, r.value, key=r.key) for r in records]


def check_all(ex: Executor, payloads: list[bytes]) -> list[str | None]:
    """The executor's per-item input check (None = fine) for each payload; executors without one
    accept everything."""
    check = getattr(ex, "check", None)
    return [check(p) for p in payloads] if check is not None else [None] * len(payloads)


def warmup_curve(ex: Executor, sizes: tuple[int, ...], reps: int = 3) -> LatencyCurve:
    """Run the example payload at each size a few times; the worst of the repetitions after the
    first seeds the worker's latency predictor (before any profile-store lookup is wired)."""
    payload = ex.example_payload()
    points = {}
    for b in sorted(set(sizes)):
        times = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            ex.run([payload] * b)
            times.append((time.perf_counter() - t0) * 1000)
        points[b] = max(times[1:])
    return LatencyCurve.fit(points)
