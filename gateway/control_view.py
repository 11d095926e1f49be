"""The gateway's view of the plan: it follows the pipeline's control topic (compacted; read from the
beginning, no consumer group) and keeps the StageConfig in force per stage (highest epoch) and the
newest TunerHandoff (``slipstream.streams.control_io.PlanInForce``), from which it reads the capacity. Each record
goes through the control topic's rules (``slipstream.streams.control_io.read_record``, with the pipeline's spec):
one that breaks them (a hand-off whose rates would overflow the shedding rule's arithmetic, say) is
logged, counted (``on_invalid``: ``slipstream_gateway_control_invalid``) and skipped."""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from ..streams import codec, control_io, kafka as kclient, topics
from ..streams.config import KafkaSettings
from ..streams.control_rules import InvalidControl
from ..streams.spec import Pipeline

log = logging.getLogger(__name__)


class ControlView:
    def __init__(self, kafka: KafkaSettings, pipeline: str, spec: Pipeline | None = None,
                 on_invalid: Callable[[], None] | None = None) -> None:
        self.kafka, self.pipeline, self.spec, self.on_invalid = kafka, pipeline, spec, on_invalid
        self.plan = control_io.PlanInForce(pipeline)
        self._consumer = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        self._consumer = kclient.consumer(self.kafka, group_id=None, enable_auto_commit=False)
        await self._consumer.start()
        tps = await kclient.topic_partitions(self._consumer, topics.control(self.pipeline))
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._consumer is not None:
            await self._consumer.stop()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _follow(self) -> None:
        while True:
            batch = await self._consumer.getmany(timeout_ms=1000)
            records = [r for rs in batch.values() for r in rs]
            await codec.prefetch(r.value for r in records)  # registry ids looked up off the loop
            self.add(records)

    def add(self, records) -> None:
        """Control-topic records, in offset order: the valid ones into the plan in force."""
        for r in records:
            try:
                kind, rec = control_io.read_record(r, self.pipeline, self.spec)
            except InvalidControl as exc:
                control_io.skipped(r, exc, self.on_invalid)
                continue
            self.plan.add(kind, rec)

    def planned_qps(self) -> float | None:
        return self.plan.capacity_qps()
