"""The Faust app factory: the only call to ``faust.App(...)``. It settles the known faust traps once
(see ../shared/research/kafka-and-faust.md):

- an explicit value serializer everywhere (``raw`` by default: stages decode with ``slipstream.streams.codec``
  themselves so an undecodable record reaches the dead-letter topic instead of faust's silent skip);
- agents are declared with ``concurrency=1`` by their callers (issue #606 loses messages otherwise);
- the web server is off unless a port is given (several workers share one host);
- ``consumer_metadata_max_age_ms`` is short (5 s, as every client's: ``slipstream.streams.kafka``) so new
  partitions are seen within seconds, not 5 min;
- no tables, so partition growth never trips ``PartitionsMismatch``;
- faust's rewind to the committed offsets also rewinds partitions without one (a grown partition's
  head was lost otherwise: ``_ReadCommittedConsumer.seek_to_committed``);
- the root logger keeps the requested level (``QuietWorker``: faust's spinner set it to DEBUG);
- the consumer reads committed records only (``isolation_level="read_committed"``, which faust sets only
  with its own ``processing_guarantee="exactly_once"``, whose transactions follow faust's commit timer,
  not a window): a worker never takes the output of an aborted or open transaction as its input;
- the consumer may be told to join its group only once the worker is warm (:func:`join_group_after`):
  a member that joined cold would take partitions in the rebalance and hold them unserved while its
  model loads (a restarted worker beside a warm standby: ``slipstream.tuner.supervisor``).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

import faust
from aiokafka.errors import IllegalStateError
from faust.transport.drivers import aiokafka as faust_aiokafka

from . import codec
from .config import KafkaSettings
from .kafka import METADATA_MAX_AGE_MS
from .members import write_members

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AppSettings:
    app_id: str
    kafka: KafkaSettings
    web_port: int | None = None  # None = web server off
    metadata_max_age_ms: int = METADATA_MAX_AGE_MS
    commit_interval_s: float = 0.5
    rebalance_timeout_s: float = 20.0


class _ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"  # read by AIOKafkaConsumer.start(), which comes later
        return consumer


class _ReadCommittedConsumer(faust_aiokafka.Consumer):
    before_join: Callable[[], Awaitable[None]] | None = None  # run once before the first subscribe
    _prepared: asyncio.Task | None = None

    def _new_consumer_thread(self):
        return _ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)

    async def subscribe(self, topics) -> None:
        if self.before_join is not None:
            if self._prepared is None:
                self._prepared = asyncio.ensure_future(self.before_join())
            await self._prepared  # raises what it raised: the app stops, its supervisor restarts it
        await super().subscribe(topics)

    async def seek_to_committed(self) -> dict:
        """Every assigned partition back to its committed offset (``perform_seek``, faust's rewind
        after a rebalance and whenever a fetch returns while the flow is stopped; the fetch's records
        are dropped), and a partition with none back to its first record: aiokafka leaves those
        where the dropped fetch left them, so the head of a partition the tuner had just grown was
        skipped (its records dropped unread, then the offsets after them committed)."""
        committed = await super().seek_to_committed()
        if uncommitted := [tp for tp, offset in committed.items() if not offset]:
            try:
                for tp, first in (await self._thread.earliest_offsets(*uncommitted)).items():
                    self._thread.seek(tp, first)
            except IllegalStateError:  # revoked meanwhile: its next assignment starts it afresh
                pass
        return committed


class ReadCommittedTransport(faust_aiokafka.Transport):
    Consumer = _ReadCommittedConsumer


class QuietWorker(faust.Worker):
    """faust's worker without its terminal spinner. To turn the spinner on every log call, faust sets
    the root logger to DEBUG (its own handler at the requested level) and leaves it there after
    start-up, so every ``log.debug`` of every library builds a ``LogRecord`` and walks the stack:
    aiokafka's producer logs each send, 13 % of a no-op stage worker's samples."""

    def on_setup_root_logger(self, logger, level: int) -> None:
        self.spinner = None
        super().on_setup_root_logger(logger, level)


def make_app(s: AppSettings) -> faust.App:
    codec.register_with_faust()
    kw = {}
    ctx = s.kafka.ssl_context()
    if s.kafka.sasl_mechanism:
        kw["broker_credentials"] = faust.SASLCredentials(
            username=s.kafka.sasl_username, password=s.kafka.sasl_password,
            mechanism=s.kafka.sasl_mechanism, ssl_context=ctx)
    elif ctx is not None:
        kw["broker_credentials"] = faust.SSLCredentials(ctx)
    web = {"web_enabled": False} if s.web_port is None else {
        "web_enabled": True, "web_port": s.web_port, "web_bind": "127.0.0.1"}
    import tempfile

    app = faust.App(
        s.app_id,
        # faust writes a data folder even with in-memory stores; one per process, so replicas of a
        # stage on one host never share it
        datadir=tempfile.mkdtemp(prefix=f"{s.app_id}-"),
        broker=s.kafka.faust_broker_url(),
        value_serializer="raw",
        key_serializer="raw",
        store="memory://",
        topic_allow_declare=False,  # topics are created by slipstream.streams.admin with their partition counts
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        consumer_metadata_max_age_ms=s.metadata_max_age_ms,
        broker_commit_interval=s.commit_interval_s,
        broker_session_timeout=s.kafka.session_timeout_s,
        broker_heartbeat_interval=s.kafka.session_timeout_s / 4,
        broker_rebalance_timeout=s.rebalance_timeout_s,
        producer_acks=-1,
        producer_linger_ms=1,
        stream_wait_empty=False,
        Worker=QuietWorker,  # the root logger keeps the requested level
        **web,
        **kw,
    )
    app.transport = ReadCommittedTransport(app.conf.broker_consumer, app)
    return app


async def rejoin_group(app: faust.App) -> None:
    """Make ``app``'s consumer rejoin its group at once: every member's partitions are revoked
    (``on_partitions_revoked``: the worker forgets what it read and did not commit), assigned again
    and read again from their committed offsets. What ``slipstream.agents.transactions`` asks for when a
    partition must be read again (aiokafka's coordinator, on the consumer's own thread: private)."""
    thread = app.consumer._thread
    consumer = thread._ensure_consumer()

    async def rejoin() -> None:
        consumer._coordinator.request_rejoin()

    await thread.call_thread(rejoin)


def join_group_after(app: faust.App, prepare: Callable[[], Awaitable[None]]) -> None:
    """Make ``app``'s consumer subscribe, and so join its group, only after ``prepare()`` (loading and
    warming the worker's model) has returned. Until then the group's other members keep every
    partition. faust starts an app's own tasks (``@app.task``) only after the first assignment, so
    what must come before the join runs here, in the task that subscribes."""
    app.consumer.before_join = prepare


def group_members(app: faust.App) -> dict[str, str]:
    """{group id: member id} of ``app``'s consumer ({} before it has one; aiokafka's coordinator:
    private, a string read across threads)."""
    consumer = app.consumer._thread._consumer
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None:
        return {}
    return {coordinator.group_id: coordinator.member_id}


def report_members(app: faust.App, path: str | Path) -> None:
    """Write ``app``'s group members to ``path`` (``slipstream.streams.members``) after every rebalance,
    for the parent process that removes them from the group when this one dies."""
    async def on_rebalance_complete(sender, **kwargs) -> None:
        try:
            write_members(path, group_members(app))
        except OSError as exc:  # the parent's folder gone: the session timeout still removes this member
            log.warning("group members not written to %s: %r", path, exc)

    app.on_rebalance_complete.connect(on_rebalance_complete)
