"""One stage worker: its parts (``slipstream.agents.stage``), wired, and its lifecycle.

faust's consumer hands each fetch of the stage's input to the intake (``slipstream.agents.stage.intake``), which
only holds it. The batch loop (``slipstream.agents.stage.windows``) admits everything that arrived at once
(decodes it; undecodable or oversize records go to the dead-letter topic), queues it on the
:class:`~slipstream.agents.window.WindowPlanner`, and takes windows when the planner says so (the decision is
``slipstream.streams.batching``, which the estimator runs too). A window goes to a free replica of the pool
(``slipstream.agents.stage.pool``: c replicas behind one queue) and is worked off on that replica's thread
(``slipstream.agents.stage.serve``). Then, in one place (``slipstream.agents.stage.commit.Commits.finish``), its outputs
(results, children's inputs, drops, errors) are produced together, their delivery is awaited, and the
window's input offsets are marked done together, in offset order per partition (``slipstream.agents.acks``);
faust commits one past each partition's done prefix (``Commits.committable``), so offsets are committed
only past work whose outputs are in Kafka. With ``processing: exactly-once`` (``slipstream.streams.config``) the
same place commits a window's outputs and its input offsets in one Kafka transaction per input
partition (``slipstream.agents.transactions``), and faust commits nothing.

Replica changes from the control topic (``slipstream.agents.stage.config_switch``) are pool changes
(``slipstream.streams.placement``): new replicas load and warm on the loader thread while the others serve and
join at a window boundary; removed ones finish their window. No consumer-group change, so no replica
ever pauses for a scale event.

Record limits are the topics' own (``slipstream.streams.limits``, read at start): an output over its topic's
limit is refused before sending and becomes an error result (``slipstream.agents.delivery``). Refused by the
broker instead, it would fail an idempotent producer's batch and every later batch of that partition
(OutOfOrderSequenceNumber stops aiokafka's sender): the Delivery then replaces the producer.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Sequence

from ..schemas.records import StageConfig, TunerHandoff
from ..streams import placement, procs, topics
from ..streams.config import KafkaSettings
from ..streams.heartbeat import Heartbeat
from ..streams.limits import read_limits
from ..streams.profile_store import ProfileStore
from ..streams.spec import Pipeline
from ..streams.timeline import mark
from .metrics import StageMetrics
from .replicas import ExecutorFactory
from .stage import log
from .stage.commit import Commits
from .stage.config_switch import ConfigSwitch
from .stage.intake import Intake
from .stage.pool import ReplicaPool
from .stage.serve import Server, check_all, check_and_run
from .stage.windows import Windows

__all__ = ["ExecutorFactory", "StageWorker", "check_all", "check_and_run"]


class StageWorker:
    """One stage's worker: the parts, wired in one constructor; the faust consumer's reader
    (``slipstream.agents.intake.BulkReader``: ``room``, :meth:`on_records`, :meth:`committable`); the lifecycle
    (start: the first config, the topics' limits, the producer; stop: drain and close) and the
    rebalance steps, which touch several parts in order."""

    def __init__(self, pipe: Pipeline, stage: str, kafka: KafkaSettings, factory: ExecutorFactory,
                 metrics: StageMetrics | None = None, worker_id: str | None = None,
                 warmup_batches: tuple[int, ...] = (), max_replicas: int | None = None,
                 profiles: ProfileStore | None = None) -> None:
        self.pipe, self.stage, self.kafka = pipe, stage, kafka
        self.metrics = metrics or StageMetrics.create(pipe.name, stage)
        self.heartbeat = Heartbeat()  # liveness (``/healthz``): the loop's ticks, model runs' deadlines
        self.started = asyncio.Event()
        wake = asyncio.Event()  # an arrival, a free replica, a delivery done or a new config
        self.pool = ReplicaPool(pipe, stage, factory, self.metrics,
                                placement.replica_cap(max_replicas, placement.cgroup_cpu_limit()),
                                profiles, warmup_batches)
        self.switch = ConfigSwitch(pipe, stage, self.pool, self.metrics, wake.set)
        self.commits = Commits(pipe, stage, kafka, self.metrics, self.heartbeat, self._room_changed, wake.set)
        self.intake = Intake(pipe, stage, self.metrics, self.commits.read, wake.set, self._queued, self._blocked)
        self.server = Server(pipe, stage, self.metrics, self.heartbeat, worker_id or procs.worker_id(),
                             self.switch.replace_hung)
        self.windows = Windows(self.intake, self.switch, self.pool, self.server, self.commits, self.metrics, wake)
        self.room = self.intake.room
        self.on_records = self.intake.on_records
        self.committable = self.commits.committable

    def _queued(self) -> int:
        return len(self.windows)

    def _blocked(self) -> bool:
        """Take no more from Kafka: the delivery backlog is full, or the queue holds more than the
        replicas serve within the SLO."""
        return self.commits.full() or self.pool.behind(len(self.windows), self.switch.config)

    def _room_changed(self) -> None:
        self.intake.update_room()

    async def start(self, held: Sequence[StageConfig] = ()) -> None:
        """Load the config to start with (``held``: this stage's StageConfigs on the control topic,
        ``ConfigSwitch.start``), then the producer; ready (``started``) after both."""
        await self.switch.start(held)
        limits = await read_limits(self.kafka, [t.name for t in topics.all_topics(self.pipe)])
        self.intake.set_limits(limits)
        await self.commits.start(limits)
        self.started.set()

    async def run_batches(self) -> None:
        await self.windows.run()

    async def offer_config(self, rec: StageConfig) -> bool:
        return await self.switch.offer(rec)

    def on_plan(self, kind: str, rec: StageConfig | TunerHandoff) -> None:
        self.intake.on_plan(kind, rec)

    async def on_revoked(self, revoked: set, commit_offsets: Callable[[dict], Awaitable[Any]]) -> None:
        """Before partitions move: forget read and queued (unprocessed, unacked) items of the revoked
        ones (Kafka redelivers them to their new owner), let the windows in progress finish, wait until
        every processed window is delivered and acked, and commit their offsets, so the new owner starts
        right after the work done here (see ``slipstream.agents.acks`` for why faust's own commit cannot)."""
        mark("revoked", partitions=len(revoked))
        self.intake.forget(revoked)
        self.windows.forget(revoked)
        self.intake.update_room()
        await self.windows.drain()
        offsets, left = await self.commits.revoke(revoked, commit_offsets)
        mark("revoke-done")
        log.info("revoked %d partition(s): committed %s; %d unfinished items left to their new owner",
                 len(revoked), {f"{tp.topic}[{tp.partition}]": o for tp, o in offsets.items()}, left)

    async def on_assigned(self, assigned: set, partitions: int | None = None) -> None:
        """After a rebalance, before faust seeks the partitions to their committed offsets: this
        worker's share of the input's ``partitions`` sets its share of what the source gate admits;
        the transactional producers of newly assigned partitions start, fencing their previous owners."""
        self.intake.set_share(len(assigned), partitions)
        await self.commits.assign(assigned)

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.windows.drain(), 10)
        except Exception:  # shutting down: whatever is unacked will be redelivered
            pass
        await self.commits.close()
        self.pool.close(*([self.switch.pending[1]] if self.switch.pending else []))
