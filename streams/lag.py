"""Consumer lag measured from the broker: per consumer group, the end offsets of its input topic minus
the group's committed offsets (the admin API), so a stage's lag is known even while it has no worker
(scaled to zero, crash-looping, not yet scheduled). The tuner exports it
(``slipstream_group_lag_records``); ``slipstream soak`` samples it. A worker's own view of its
assigned partitions is ``slipstream_consumer_lag_records`` (slipstream.agents.ready)."""
from __future__ import annotations

from typing import Mapping

from . import kafka as kclient, topics
from .config import KafkaSettings
from .spec import Pipeline


def group_lag(ends: Mapping, committed: Mapping, starts: Mapping | None = None) -> int:
    """Records not yet committed by a group over the partitions ``ends`` lists: end offset minus the
    committed offset, where nothing is committed minus the log's start (``starts``, default 0)."""
    start = starts or {}
    return sum(max(0, end - (committed[tp] if tp in committed else start.get(tp, 0))) for tp, end in ends.items())


def stage_groups(pipe: Pipeline) -> dict[str, str]:
    """Each worker role's consumer group and the topic it consumes (stages, and the join's)."""
    groups = {topics.consumer_group(pipe.name, s.name): topics.stage_input(pipe.name, s.name) for s in pipe.stages}
    if pipe.needs_join:
        groups[topics.consumer_group(pipe.name, "join")] = topics.join(pipe.name)
    return groups


async def committed(admin, group: str) -> dict:
    """``group``'s committed offsets (partition -> offset; partitions with nothing committed left out)."""
    return {tp: m.offset for tp, m in (await admin.list_consumer_group_offsets(group)).items() if m.offset >= 0}


class LagReader:
    """Each group's lag on its input topic (``groups``: group -> topic), read from the broker. The
    partitions are looked up on every read (the tuner grows topics)."""

    def __init__(self, settings: KafkaSettings, groups: Mapping[str, str]) -> None:
        self.settings, self.groups = settings, dict(groups)

    async def start(self) -> None:
        from .admin import admin_client

        self._admin_cm = admin_client(self.settings)
        self.admin = await self._admin_cm.__aenter__()
        self.cons = kclient.consumer(self.settings, group_id=None, enable_auto_commit=False)
        await self.cons.start()

    async def read(self) -> dict[str, int]:
        out = {}
        for group, topic in self.groups.items():
            tps = await kclient.topic_partitions(self.cons, topic)
            ends, starts = await self.cons.end_offsets(tps), await self.cons.beginning_offsets(tps)
            out[group] = group_lag(ends, await committed(self.admin, group), starts)
        return out

    async def stop(self) -> None:
        await self.cons.stop()
        await self._admin_cm.__aexit__(None, None, None)
