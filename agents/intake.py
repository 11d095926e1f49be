"""Bulk intake: the faust app's own consumer hands each fetch of a stage's input topic to the worker
in one call, and commits the worker's done prefix.

faust's fetcher (``Consumer._drain_messages``) turns every fetched record into a ``ConsumerMessage``,
awaits the conductor's ``on_message`` for it (under ``wait_first``: a task per record) and the agent's
stream wraps it in an ``Event``; that per-record path was ~17 % of a no-op worker's profile
(docs/dataplane.md). :class:`BulkConsumer` keeps faust's consumer, its group membership, rebalances,
seeks, flow control and commit timer, and changes two things for topics that have a
:class:`BulkReader`:

- **reading**: a fetch's records of such a topic go to ``reader.on_records(tp, records)`` (aiokafka
  ``ConsumerRecord``s, in offset order, one call per partition per fetch), after the checks faust makes
  per record (flow active, same generation, partition active, offset not behind the read offset:
  for these topics the next offset expected, one past the last handed over, so no record is handed
  over twice when the fetcher goes back without faust's knowing, as records drained while a rewind
  runs, then handed over after it) and
  once ``reader.room`` is set (back-pressure); records of other topics keep faust's per-message path
  to their agents;
- **committing**: the offset faust commits for such a partition is ``reader.committable(tp)`` (one past
  the worker's done prefix, ``slipstream.agents.acks``: in offset order, after the outputs are in Kafka), not one
  derived from per-message acks, so the worker acks nothing through faust (the topic has acks off).
  ``committable`` returns None when the worker commits in its own transactions (exactly-once).
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Hashable, Iterable, Protocol

from ..streams.app import ReadCommittedTransport, _ReadCommittedConsumer


class BulkReader(Protocol):
    room: asyncio.Event  # set while the reader takes more records (a bound on what it holds)

    def on_records(self, tp: Hashable, records: list) -> None: ...

    def committable(self, tp: Hashable) -> int | None: ...


def fresh(records: list, read_offset: int | None) -> list:
    """The records of one partition's fetch that faust would deliver: not behind the read offset
    (a seek back makes the fetcher return records it had already prefetched)."""
    if read_offset is None or not records or records[0].offset >= read_offset:
        return records
    return [r for r in records if r.offset >= read_offset]


def split_fetch(records: dict, active: set | None, buffered: set, read_offset: Callable[[Any], int | None],
                reader_for: Callable[[str], BulkReader | None]) -> tuple[list, dict]:
    """One fetch ({tp: records}) -> ([(reader, tp, fresh records)] for topics with a reader, {tp:
    records} for the others), keeping only partitions faust would deliver (active or buffered)."""
    bulk, rest = [], {}
    for tp, recs in records.items():
        if active is not None and tp not in active and tp not in buffered:
            continue
        reader = reader_for(tp.topic)
        if reader is None:
            rest[tp] = recs
            continue
        recs = fresh(recs, read_offset(tp))
        if recs:
            bulk.append((reader, tp, recs))
    return bulk, rest


class BulkConsumer(_ReadCommittedConsumer):
    def _reader(self, topic: str) -> BulkReader | None:
        return self.transport.readers.get(topic)

    async def _drain_messages(self, fetcher) -> None:  # pragma: no cover - needs a broker (integration)
        """faust's fetch loop, one hand-off per partition and fetch for topics with a reader."""
        try:
            while not (self._stopped.is_set() or fetcher._stopped.is_set()):
                await asyncio.sleep(0)  # as faust's loop: never hog the event loop between fetches
                records, active = await self._wait_next_records(1.0)
                if records and not self.should_stop:
                    await self._hand_off(records, active, self.app.consumer_generation_id)
        except self.consumer_stopped_errors:
            if not self.transport.app.should_stop:
                raise
        except asyncio.CancelledError:
            if not self.transport.app.should_stop:
                raise

    async def _hand_off(self, records: dict, active, generation: int) -> None:  # pragma: no cover
        if not self.flow_active:
            await self.perform_seek()  # what faust's getmany does when the flow stopped meanwhile
            return
        bulk, rest = split_fetch(records, active, self._buffered_partitions, self._read_offset.__getitem__,
                                 self._reader)
        for reader, tp, recs in bulk:
            if not reader.room.is_set():  # back-pressure, as faust's full stream buffer
                await self.wait_first(reader.room.wait(), self.suspend_flow.wait())
            if self.app.consumer_generation_id != generation or not self.flow_active:
                return  # a rebalance began: faust drops the rest of the fetch too
            self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
            reader.on_records(tp, recs)
            self._read_offset[tp] = recs[-1].offset + 1  # the next expected (faust keeps the last read)
        if rest:
            await self._deliver_each(rest, generation)

    async def _deliver_each(self, records: dict, generation: int) -> None:  # pragma: no cover
        """faust's per-message path (``Consumer._drain_messages``) for topics without a reader."""
        for tp, recs in records.items():
            for rec in fresh(recs, self._read_offset[tp]):
                if self.app.consumer_generation_id != generation or not self.flow_active:
                    return
                last = self._read_offset[tp]
                if last and rec.offset - last > 1 and self.app.topics.acks_enabled_for(tp.topic):
                    await self._add_gap(tp, last + 1, rec.offset)
                message = self._to_message(tp, rec)
                await self.wait_first(self.callback(message), self.suspend_flow.wait())
                self._read_offset[tp] = rec.offset

    def _filter_tps_with_pending_acks(self, topics=None) -> Iterable:
        tps = list(super()._filter_tps_with_pending_acks(topics))
        for tp in self.assignment():
            if self._reader(tp.topic) is not None and (topics is None or tp in topics or tp.topic in topics):
                tps.append(tp)
        return tps

    def _new_offset(self, tp) -> int | None:
        reader = self._reader(tp.topic)
        return reader.committable(tp) if reader is not None else super()._new_offset(tp)


class BulkTransport(ReadCommittedTransport):
    Consumer = BulkConsumer

    def __init__(self, *args: Any, readers: dict[str, BulkReader], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.readers = readers


def use_bulk_intake(app, readers: dict[str, BulkReader]) -> None:
    """Give ``app`` (``slipstream.streams.app.make_app``'s, not started yet) the bulk-reading consumer."""
    app.transport = BulkTransport(app.conf.broker_consumer, app, readers=readers)
