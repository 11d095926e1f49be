"""Control-plane Kafka bindings shared by the planner and the tuner: arrival timestamps in, results'
hop timings in (:class:`KafkaResults`, for the workers' pace), StageConfig/ScalingAction out,
partitions grown.

Arrivals come from the *offsets* of the pipeline's input topic, never from its records: the input
topic carries the payloads (images up to 16 MiB), and fetching them only to read timestamps doubled the
topic's egress. :class:`KafkaArrivals` is the one place that turns offsets into arrival timestamps:

- history: ``offsets_for_times`` at every ``lookback_step_s`` of the last ``lookback_s`` (the record
  timestamps the producer set from ``created_ns``) counts the arrivals of each step;
- live: every ``poll_ms`` the partitions' end offsets (one ListOffsets request) count what arrived
  since the previous poll.

The arrivals of a step are spread evenly over it (:func:`spread`), so timestamps are exact to one step
(``poll_ms``, 20 ms by default) and the bytes read per arrival do not grow with the payload (``python -m
slipstream.loadgen.bench.arrivals``). Two clients, neither in a group (they must not steal partitions from the
source stage's workers): one follows the control topic from the beginning (compacted: the latest
StageConfig per stage, so a scaling action republishes the stage's current variant/batch with only
the replicas changed), the other asks the offsets and never fetches. A broker answers a connection's
requests in order, so offsets asked on the follower's connection wait behind its long-polling fetch
(``slipstream.streams.kafka.consumer``): one client, they came every fetch wait, not every ``poll_ms``. Partitions
added to the input topic are picked up within ``metadata_refresh_s``.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import AsyncIterator, Callable, Mapping

import numpy as np

from ..schemas.records import StageConfig, TunerHandoff, of as record_class
from . import admin, codec, kafka as kclient, topics
from .config import KafkaSettings
from .control_rules import KINDS, InvalidControl, check, check_key
from .shedding import host_ms_per_request
from .spec import Pipeline

log = logging.getLogger(__name__)
NS_PER_MS = 1_000_000


def spread(n: int, t0_ns: int, t1_ns: int) -> np.ndarray:
    """``n`` arrivals counted in (t0, t1], as evenly spaced timestamps ending at t1."""
    if n <= 0:
        return np.empty(0, dtype=np.int64)
    return t0_ns + ((np.arange(1, n + 1, dtype=np.int64) * (t1_ns - t0_ns)) // n)


class OffsetCounter:
    """Arrivals from successive offset snapshots of a topic's partitions ({tp: next offset}). A
    partition seen for the first time counts from its first snapshot (its history is the lookback's)."""

    def __init__(self) -> None:
        self.last: dict = {}
        self.last_ns: int | None = None

    def observe(self, ends: Mapping, now_ns: int) -> np.ndarray:
        n = sum(max(int(o) - self.last.get(tp, int(o)), 0) for tp, o in ends.items())
        t0 = self.last_ns if self.last_ns is not None else now_ns
        self.last.update({tp: int(o) for tp, o in ends.items()})
        self.last_ns = now_ns
        return spread(n, t0, now_ns)


class KafkaArrivals:
    """Async iterator of arrival-timestamp chunks (epoch ns) of the input topic, read from its offsets
    (see the module docstring); control records go to ``on_stage_config`` / ``on_handoff``."""

    def __init__(self, settings: KafkaSettings, pipeline: str, source_stage: str, *,
                 on_stage_config: Callable[[StageConfig], None], lookback_s: float = 60.0,
                 poll_ms: int = 20, on_handoff: Callable[[TunerHandoff], None] | None = None,
                 lookback_step_s: float = 0.25, metadata_refresh_s: float = 5.0,
                 spec: Pipeline | None = None, on_invalid: Callable[[], None] | None = None) -> None:
        self.settings = settings
        self.pipeline, self.spec = pipeline, spec
        self.input_topic = topics.stage_input(pipeline, source_stage)
        self.control_topic = topics.control(pipeline)
        self._on_config = on_stage_config
        self._on_handoff = on_handoff
        self._on_invalid = on_invalid
        self._lookback_ns = int(lookback_s * 1e9)
        self._step_ns = int(lookback_step_s * 1e9)
        self._poll_ms = poll_ms
        self._refresh_ns = int(metadata_refresh_s * 1e9)
        self._consumer = None  # follows the control topic
        self._offsets = None  # asks the input topic's offsets and metadata; never fetches
        self._inputs: list = []
        self._inputs_at = 0
        self._counter = OffsetCounter()
        self._history = np.empty(0, dtype=np.int64)

    async def start(self) -> None:
        self._consumer = kclient.consumer(self.settings, self.control_topic, group_id=None,
                                          enable_auto_commit=False, auto_offset_reset="earliest")
        self._offsets = kclient.consumer(self.settings, group_id=None, enable_auto_commit=False)
        await asyncio.gather(self._consumer.start(), self._offsets.start())
        self._inputs = await self._input_partitions()  # LookupError: run the pipeline's topic setup
        self._inputs_at = time.time_ns()
        now = time.time_ns()
        self._history = await self._lookback(now)

    async def _input_partitions(self) -> list:
        """The input topic's partitions, from a metadata request for that topic alone."""
        return await kclient.topic_partitions(self._offsets, self.input_topic, fresh=True)

    async def _lookback(self, now_ns: int) -> np.ndarray:
        """Arrivals of the last ``lookback_s``, one ``offsets_for_times`` per step, ending with the end
        offsets at ``now_ns`` (the live counter's baseline)."""
        ends = await self._offsets.end_offsets(self._inputs)
        grid = list(range(now_ns - self._lookback_ns, now_ns, max(self._step_ns, 1)))
        # every step's request at once: the client pipelines them on its connection (sequential round
        # trips took seconds on a loaded machine, and the history aged past the tuner's scale-up view)
        found = await asyncio.gather(*(self._offsets.offsets_for_times(
            {tp: t // NS_PER_MS for tp in self._inputs}) for t in grid))
        counter, chunks = OffsetCounter(), []
        for t, at in zip(grid, found):
            snap = {tp: (at[tp].offset if at.get(tp) is not None else ends[tp]) for tp in self._inputs}
            chunks.append(counter.observe(snap, t))
        chunks.append(counter.observe(ends, now_ns))
        self._counter.observe(ends, now_ns)
        return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)

    async def stop(self) -> None:
        clients = [c for c in (self._consumer, self._offsets) if c is not None]
        self._consumer = self._offsets = None
        await asyncio.gather(*(c.stop() for c in clients))

    def __aiter__(self) -> AsyncIterator[np.ndarray]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[np.ndarray]:
        if self._consumer is None:
            await self.start()
        if len(self._history):
            yield self._history
            self._history = np.empty(0, dtype=np.int64)
        while True:
            batch = await self._consumer.getmany(timeout_ms=self._poll_ms)
            await codec.prefetch(r.value for records in batch.values() for r in records)
            for records in batch.values():
                for r in records:
                    self._control(r)
            now = time.time_ns()
            if now - self._inputs_at >= self._refresh_ns:  # partitions only grow
                with contextlib.suppress(LookupError):  # the topic gone: keep counting what was
                    self._inputs = sorted({*self._inputs, *await self._input_partitions()})
                self._inputs_at = now
            stamps = self._counter.observe(await self._offsets.end_offsets(self._inputs), time.time_ns())
            if len(stamps):
                yield stamps

    def _control(self, r) -> None:
        """A valid control record to its callback, by its type (StageConfig, TunerHandoff); an invalid
        one is logged, counted (``on_invalid``) and skipped."""
        try:
            kind, rec = read_record(r, self.pipeline, self.spec)
        except InvalidControl as exc:
            skipped(r, exc, self._on_invalid)
            return
        if kind == "TunerHandoff":
            if self._on_handoff is not None:
                self._on_handoff(rec)
        else:
            self._on_config(rec)


class KafkaResults:
    """Decoded InferenceResults of a pipeline's results topic from its end when started: the tuner
    reads their hop timings for the workers' pace (``slipstream.tuner.pace``). No consumer group (it takes no
    partitions from the results' readers) and no commits; an undecodable record is logged and skipped."""

    def __init__(self, settings: KafkaSettings, pipeline: str, *, poll_ms: int = 200, max_records: int = 500) -> None:
        self.settings, self.topic = settings, topics.results(pipeline)
        self._poll_ms, self._max = poll_ms, max_records
        self._consumer = None

    async def start(self) -> None:
        self._consumer = kclient.consumer(self.settings, self.topic, group_id=None, enable_auto_commit=False,
                                          auto_offset_reset="latest", **kclient.FOLLOWER_FETCH)
        await self._consumer.start()

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def follow(self, on_result: Callable[[Mapping], None], stop: asyncio.Event) -> None:
        """Hand every result to ``on_result`` until ``stop``."""
        while not stop.is_set():
            batch = await self._consumer.getmany(timeout_ms=self._poll_ms, max_records=self._max)
            await codec.prefetch(r.value for records in batch.values() for r in records)
            for records in batch.values():
                for r in records:
                    try:
                        on_result(codec.decode("InferenceResult", r.value))
                    except codec.CodecError as exc:
                        log.warning("undecodable result at %s[%d]@%d skipped: %s", r.topic, r.partition,
                                    r.offset, exc)
            await asyncio.sleep(0)  # a full batch decoded: let the tuner's tick run


class KafkaPublisher:
    """Publishes a pipeline's control and scaling records, awaiting delivery of each (a scaling action
    is never fire-and-forget). Its producer tracks those two topics from the start: one that has sent
    nothing yet would otherwise refresh the metadata of every topic of the cluster."""

    def __init__(self, settings: KafkaSettings, pipeline: str) -> None:
        self.settings = settings
        self.topics = [topics.control(pipeline), topics.scaling(pipeline)]
        self._producer = None

    async def start(self) -> None:
        self._producer = kclient.producer(self.settings)
        await self._producer.start()
        await self._producer.client.set_topics(self.topics)

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def publish(self, topic: str, record: str, value: StageConfig | TunerHandoff | Mapping, key: str) -> int:
        """Send and await delivery; returns the record's offset (on the control topic: its epoch)."""
        fut = await kclient.send(self._producer, topic, record, value, key=key)
        return (await fut).offset


def record_type(r) -> str:
    """The record type a control-topic record's schema header names (StageConfig if it has none)."""
    return dict(r.headers or ()).get(kclient.SCHEMA_HEADER, b"StageConfig").decode(errors="replace")


def read_record(r, pipeline: str, spec: Pipeline | None = None) -> tuple[str, StageConfig | TunerHandoff]:
    """(record type, typed value: ``slipstream.schemas.records``) of a control-topic record, checked by
    ``slipstream.streams.control_rules`` (key, type, body, fields; ``spec``: the reader's pipeline, for its
    stages and variants). The value's ``epoch`` is the record's offset: the order of the control topic
    (one partition), which no writer can repeat or overflow. Raises :class:`InvalidControl` naming the
    problem."""
    key = check_key(r.key)
    if r.partition != 0:
        raise InvalidControl(f"partition {r.partition}: the control topic has one partition (its offsets "
                             "order the records)")
    kind = record_type(r)
    try:
        rec = codec.decode(kind, r.value) if kind in KINDS else {}
    except codec.CodecError as exc:
        raise InvalidControl(str(exc)) from None
    check(kind, key, rec, pipeline, spec)
    rec["epoch"] = int(r.offset)
    return kind, record_class(kind).from_dict(rec)


def skipped(r, exc: InvalidControl, count: Callable[[], None] | None = None) -> None:
    """Log an invalid control record with where it is, and count it."""
    log.warning("invalid control record skipped at %s[%d]@%d: %s", r.topic, r.partition, r.offset, exc)
    if count is not None:
        count()


def grower(settings: KafkaSettings):
    """``grow(topic, n)`` for the service, through ``slipstream.streams.admin.grow_partitions``."""

    async def grow(topic: str, count: int) -> int:
        return await admin.grow_partitions(settings, topic, count)

    return grow


async def stage_partitions(settings: KafkaSettings, pipeline: str, stages: list[str]) -> dict[str, int]:
    """Current partition count of each stage's input topic."""
    names = {topics.stage_input(pipeline, s): s for s in stages}
    counts = await admin.partition_counts(settings, list(names))
    return {names[t]: n for t, n in counts.items()}


def control_records(msgs, kind: str, pipeline: str, spec: Pipeline | None = None) -> list:
    """The valid ``kind`` records (StageConfig, TunerHandoff) among control-topic messages
    (:func:`read_record`); invalid ones are logged and skipped."""
    out = []
    for r in msgs:
        try:
            got, rec = read_record(r, pipeline, spec)
        except InvalidControl as exc:
            skipped(r, exc)
            continue
        if got == kind:
            out.append(rec)
    return out


async def read_control_topic(settings: KafkaSettings, pipeline: str, kind: str, *, timeout_s: float = 10.0,
                       wait_s: float = 0.0, on_wait: Callable[[str, float], None] | None = None,
                       spec: Pipeline | None = None) -> list:
    """Every ``kind`` record on the pipeline's control topic, read to its end (within ``timeout_s``).
    When there is none and ``wait_s`` > 0: ``on_wait(topic, wait_s)``, then follow the topic until one
    arrives or ``wait_s`` has passed (an empty list)."""
    topic = topics.control(pipeline)
    cons = kclient.consumer(settings, group_id=None, enable_auto_commit=False)
    await cons.start()
    found: list = []

    async def take(batch) -> None:
        await codec.prefetch(r.value for records in batch.values() for r in records)
        found.extend(control_records([r for records in batch.values() for r in records], kind, pipeline, spec))

    try:
        tps = await kclient.topic_partitions(cons, topic)
        cons.assign(tps)
        ends = await cons.end_offsets(tps)
        await cons.seek_to_beginning(*tps)
        async with asyncio.timeout(timeout_s):
            while behind := [tp for tp in tps if await cons.position(tp) < ends[tp]]:
                await take(await cons.getmany(*behind, timeout_ms=200))
        if found or wait_s <= 0:
            return found
        (on_wait or (lambda t, w: log.info("no %s on %s yet: waiting up to %.0f s", kind, t, w)))(topic, wait_s)
        try:
            async with asyncio.timeout(wait_s):
                while not found:
                    await take(await cons.getmany(*tps, timeout_ms=1000))
        except TimeoutError:
            pass
        return found
    finally:
        await cons.stop()


async def latest_epoch(settings: KafkaSettings, pipeline: str, timeout_s: float = 10.0) -> int:
    """The highest StageConfig epoch on the pipeline's control topic (0 when it is empty)."""
    configs = await read_control_topic(settings, pipeline, "StageConfig", timeout_s=timeout_s)
    return max((r.epoch for r in configs), default=0)


def newest_handoff(handoffs: list[TunerHandoff], pipeline: str) -> TunerHandoff | None:
    """The pipeline's TunerHandoff of the highest epoch (None when there is none)."""
    mine = [r for r in handoffs if r.pipeline == pipeline]
    return max(mine, key=lambda r: r.epoch, default=None)


async def latest_handoff(settings: KafkaSettings, pipeline: str, *, wait_s: float = 0.0,
                         on_wait: Callable[[str, float], None] | None = None) -> TunerHandoff | None:
    """The planner's latest TunerHandoff on the pipeline's control topic, waiting up to ``wait_s`` for
    one when there is none yet (None after that)."""
    handoffs = await read_control_topic(settings, pipeline, "TunerHandoff", wait_s=wait_s, on_wait=on_wait)
    return newest_handoff(handoffs, pipeline)


def planned_capacity_qps(handoff: TunerHandoff | None, replicas: Mapping[str, int],
                         routing: Mapping[str, Mapping[str, float]] | None = None) -> float | None:
    """The slowest stage's capacity in pipeline requests/s from the planner's hand-off, with the replicas
    of the StageConfigs in force (the tuner changes them) where known. A stage whose hand-off names a
    ladder of variants (loki) serves at its ``routing`` shares in force (the tuner moves them):
    n / sum_v f_v / c_v, with c_v what one replica serves on v."""
    if handoff is None or not handoff.stages:
        return None
    ladders = {c.stage: {r.variant: r.rate_qps for r in c.ladder} for c in handoff.capacity}
    caps = []
    for s in handoff.stages:
        n = replicas.get(s.stage, s.replicas)
        shares = _shares(routing, s.stage)
        rates = ladders.get(s.stage, {})
        if shares and all(rates.get(v, 0) > 0 for v in shares):
            caps.append(n * sum(shares.values()) / sum(f / rates[v] for v, f in shares.items()))
        else:
            caps.append(s.mu_qps * n / max(s.visit_ratio, 1e-9))
    return min(caps + [host_capacity_qps(handoff, routing)])


def _shares(routing: Mapping[str, Mapping[str, float]] | None, stage: str) -> dict[str, float]:
    return {v: f for v, f in ((routing or {}).get(stage) or {}).items() if f > 0}


def host_capacity_qps(handoff: TunerHandoff, routing: Mapping[str, Mapping[str, float]] | None = None) -> float:
    """What the hand-off's host serves whatever the replicas (``slipstream.planner.cores.host_qps``): its free
    cores over the CPU one request takes, the co-located processes' per request, the workers' per
    window once per stage visit (windows of one item, ``HostModel.per_request_ms``), plus each
    stage's visits times its CPU per item (a loki stage's at its ``routing`` shares in force); inf
    without a host."""
    host = handoff.host
    if host is None or host.free_cores <= 0:
        return math.inf
    visits = {s.stage: s.visit_ratio for s in handoff.stages}
    ms = host_ms_per_request(host.request_cpu_ms, host.window_cpu_ms, sum(visits.values()))
    for c in handoff.capacity:
        rungs = {r.variant: r.cpu_ms_per_item for r in c.ladder}
        shares = _shares(routing, c.stage)
        if shares and all(rungs.get(v, 0) > 0 for v in shares):
            per_item = sum(f * rungs[v] for v, f in shares.items()) / sum(shares.values())
        else:
            per_item = c.cpu_ms_per_item
        ms += visits.get(c.stage, 1.0) * per_item
    return host.free_cores * 1000.0 / ms if ms > 0 else math.inf


class PlanInForce:
    """The plan as the control topic states it, for readers that follow it (the gateway, the source
    stage's workers): the StageConfig in force per stage (the highest epoch) and the newest
    TunerHandoff, fed one checked record at a time (:func:`read_record`'s output)."""

    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline
        self.configs: dict[str, StageConfig] = {}
        self.handoff: TunerHandoff | None = None

    def add(self, kind: str, rec: StageConfig | TunerHandoff) -> None:
        if rec.pipeline != self.pipeline:
            return
        if kind == "StageConfig":
            old = self.configs.get(rec.stage)
            if old is None or rec.epoch >= old.epoch:  # epoch = offset
                self.configs[rec.stage] = rec
        elif kind == "TunerHandoff" and (self.handoff is None or rec.epoch >= self.handoff.epoch):
            self.handoff = rec

    def capacity_qps(self) -> float | None:
        return planned_capacity_qps(self.handoff, {s: c.replicas for s, c in self.configs.items()},
                                    {s: c.routing for s, c in self.configs.items()})
