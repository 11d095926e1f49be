"""One stage worker: the faust shell around the window planner (``slipstream.agents.window``).

faust's consumer hands each fetch of the stage's input to :meth:`~slipstream.agents.stage.intake.Intake.on_records`
(``slipstream.agents.intake``), which only appends it to an intake list. The batch loop reads everything that
arrived at once (decodes it; undecodable or oversize records go to the dead-letter topic), hands it to
the :class:`~slipstream.agents.window.WindowPlanner`, and takes windows when the planner says so (the decision is
``slipstream.streams.batching``, which the estimator runs too). A window goes to a free model instance
(``slipstream.agents.instances``: c instances behind one queue) and is worked off on that instance's thread as
``slipstream.streams.batching`` describes. Then, in one place (:meth:`~slipstream.agents.stage.commit.Commit._finish`), its outputs (results,
children's inputs, drops, errors) are produced together, their delivery is awaited, and the window's
input offsets are marked done together, in offset order per partition (``slipstream.agents.acks``); faust
commits one past each partition's done prefix (:meth:`~slipstream.agents.stage.commit.Commit.committable`), so offsets are
committed only past work whose outputs are in Kafka. With ``processing: exactly-once``
(``slipstream.streams.config``) the same place commits a window's outputs and its input offsets in one Kafka
transaction per input partition (``slipstream.agents.transactions``), and faust commits nothing.

Replica changes from the control topic are instance changes (``slipstream.streams.placement``): new instances
load and warm on the loader thread while the others serve and join at a window boundary; removed
ones finish their window. No consumer-group change, so no instance ever pauses for a scale event.

This module holds the worker's state and lifecycle; each concern is a part of ``slipstream.agents.stage``
(intake, windows, serve, commit, config switch, fleet, rebalance), mixed into :class:`StageWorker`.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping, Sequence

from slipstream.agents.acks import AckTracker
from slipstream.agents.backlog import Backlog
from slipstream.agents.control import ActiveConfig, defaults
from slipstream.agents.delivery import Delivery
from slipstream.agents.instances import ExecutorFactory, Fleet, run_deadline_s
from slipstream.agents.metrics import StageMetrics
from slipstream.streams.shedding import SourceGate
from slipstream.agents.stage.commit import WINDOW_BATCH_BYTES, WINDOW_LINGER_MS, Commit
from slipstream.agents.stage.config_switch import ConfigSwitch
from slipstream.agents.stage.fleet import FleetKeeper, Spares
from slipstream.agents.stage.intake import Intake
from slipstream.agents.stage.rebalance import Rebalance
from slipstream.agents.stage.serve import Serve, check_all, check_and_run
from slipstream.agents.stage.windows import Windows
from slipstream.agents.transactions import PartitionTransactions
from slipstream.agents.window import WindowPlanner
from slipstream.streams import contract, control_io, placement, procs, topics
from slipstream.streams.config import KafkaSettings
from slipstream.streams.heartbeat import Heartbeat
from slipstream.streams.limits import Limits, read_limits
from slipstream.streams.profile_store import ProfileStore
from slipstream.streams.spec import Pipeline
from slipstream.streams.timeline import mark

# Record limits are the topics' own (``slipstream.streams.limits``, read at start): an output over its topic's
# limit is refused before sending and becomes an error result (``slipstream.agents.delivery``). Refused by the
# broker instead, it would fail an idempotent producer's batch and every later batch of that partition
# (OutOfOrderSequenceNumber stops aiokafka's sender): the Delivery then replaces the producer.
__all__ = ["ExecutorFactory", "StageWorker", "check_all", "check_and_run"]


class StageWorker(Intake, Windows, Serve, Commit, ConfigSwitch, FleetKeeper, Rebalance):
    """One stage's worker: the state every part (``slipstream.agents.stage``) works on, set here, and the
    lifecycle (start: the first fleet, the topics' limits, the producer; stop: drain and close)."""

    def __init__(self, pipe: Pipeline, stage: str, kafka: KafkaSettings, factory: ExecutorFactory,
                 metrics: StageMetrics | None = None, worker_id: str | None = None,
                 warmup_batches: tuple[int, ...] = (), max_instances: int | None = None,
                 profiles: ProfileStore | None = None) -> None:
        self.pipe, self.stage, self.kafka, self.factory = pipe, stage, kafka, factory
        self.spec = pipe.stage(stage)
        self.metrics = metrics or StageMetrics.create(pipe.name, stage)
        self.worker_id = worker_id or procs.worker_id()
        self.max_instances = placement.instance_cap(max_instances, placement.cgroup_cpu_limit())
        self.profiles = profiles  # the planner's profile store: predictors start from its numbers
        self.config: ActiveConfig = defaults(pipe, stage)
        self.fleet = Fleet()
        self.spares = Spares()  # loaded copies serving nothing, for the next scale-up (slipstream.agents.stage.fleet)
        self._spare_fill: asyncio.Future | None = None
        self._pending: tuple[ActiveConfig, Fleet] | None = None
        self._intake: list = []  # (tp, records, received_ns) per fetch since the batch loop last looked
        self._intake_n = 0  # records on it
        self.room = asyncio.Event()  # set while fewer than MAX_QUEUED records wait (slipstream.agents.intake)
        self.room.set()
        self.gate = SourceGate(stage)  # deadline drops before decoding; at the source, shedding too
        self.plan_in_force = control_io.PlanInForce(pipe.name)
        self.input_share = 1.0
        self._pace_ns = 0
        self.planner = WindowPlanner()
        self._wake = asyncio.Event()  # an arrival, a free instance or a new config
        # loads and warm-ups of new instances run beside serving, so no batch waits on a load
        self.loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"load-{stage}")
        self.delivery: Delivery | None = None  # at least once (:meth:`start`)
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
        self.bounds = self._bounds()  # the data contract's (slipstream.streams.contract), again once the limits are read

    async def start(self, held: Sequence[Mapping] = ()) -> None:
        """Load the config to start with (``held``: this stage's StageConfigs on the control topic,
        :meth:`_initial_config`), then the producer; ready (``started``) after both."""
        self.config, self.fleet = await self._initial_config(held)
        self.metrics.lab(self.metrics.config_epoch).set(self.config.epoch)
        self._set_instance_gauge()
        mark("model-loaded", instances=len(self.fleet.instances))
        self._keep_spares()
        self.limits = await read_limits(self.kafka, [t.name for t in topics.all_topics(self.pipe)])
        self.bounds = self._bounds()
        if self.txns is None:  # the Delivery owns the producer: it replaces one the broker refused a batch of
            self.delivery = await Delivery.started(self.kafka, self.pipe, self.stage, self._delivery_failed,
                                                   self.limits, linger_ms=WINDOW_LINGER_MS,
                                                   max_batch_size=WINDOW_BATCH_BYTES,
                                                   max_request_size=self.limits.largest())
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
        if self.delivery is not None:
            await self.delivery.close()
        if self.txns is not None:
            await self.txns.close_all()
        if self._spare_fill is not None:
            self._spare_fill.cancel()
        self.loader.shutdown(wait=True)
        pending = self._pending[1].instances if self._pending else []
        for inst in {id(i): i for i in [*self.fleet.instances, *pending]}.values():
            inst.retire()
        self.spares.clear()
