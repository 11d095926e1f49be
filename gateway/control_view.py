"""The gateway's view of the plan: it follows the pipeline's control topic (compacted; read from the
beginning, no consumer group) and keeps the StageConfig in force per stage (highest epoch) and the
newest TunerHandoff (``streams.control_io.PlanInForce``), from which it reads the capacity."""
from __future__ import annotations

import asyncio
import logging

from streams import codec, control_io, kafka as kclient, topics
from streams.config import KafkaSettings

log = logging.getLogger(__name__)


class ControlView:
    def __init__(self, kafka: KafkaSettings, pipeline: str) -> None:
        self.kafka, self.pipeline = kafka, pipeline
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
            for kind in ("StageConfig", "TunerHandoff"):
                for rec in control_io.control_records(records, kind, self.pipeline):
                    self.plan.add(kind, rec)

    def planned_qps(self) -> float | None:
        return self.plan.capacity_qps()
