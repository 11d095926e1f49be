"""Thin aiokafka wrappers: producers and consumers built from KafkaSettings, records through the codec.

Only ``streams/`` imports aiokafka; other layers get clients from here. Every record carries the header
``slipstream-schema`` naming its record type, so a reader of a mixed stream can tell them apart.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from ..schemas.records import Record
from . import codec, expiry
from .config import KafkaSettings
from .limits import MAX_REQUEST_BYTES, Limits

SCHEMA_HEADER = "slipstream-schema"
FETCH_MAX_WAIT_MS = 500  # a consumer's long poll (aiokafka's default); see consumer()
# Every client refreshes its metadata this often (aiokafka's default is 5 min), so partitions the tuner
# adds are written by producers and read by groups within seconds: with the default a producer kept
# writing only the old partitions for minutes, and the consumers added for the new ones sat idle.
METADATA_MAX_AGE_MS = 5000
# For readers of the results topic that need no answer within milliseconds (a result's times are
# stamped by the worker): the broker holds a fetch until this much is there or the wait is over, so
# a follower fetches a few times a second instead of once per result (each fetch costs the follower
# and the broker CPU). The tuner's pace reads them within one of its 100-ms ticks; the planner's
# measured p99 (over 10 s or more) and a load generator's collector need them within a second.
FOLLOWER_FETCH = {"fetch_min_bytes": 1024 * 1024, "fetch_max_wait_ms": 100}
REPORT_FETCH = {**FOLLOWER_FETCH, "fetch_max_wait_ms": FETCH_MAX_WAIT_MS}


def producer(settings: KafkaSettings, **overrides: Any) -> AIOKafkaProducer:
    """Idempotent, acks=all: a write is confirmed once every in-sync replica has it, and a retry after a
    lost acknowledgement is not written twice (the broker drops the sequence number it already has)."""
    kw = dict(acks="all", enable_idempotence=True, linger_ms=1, max_request_size=MAX_REQUEST_BYTES,
              metadata_max_age_ms=METADATA_MAX_AGE_MS)
    kw.update(overrides)
    return AIOKafkaProducer(**settings.aiokafka_kwargs(), **kw)


# A transaction begun right after the previous one committed is refused with CONCURRENT_TRANSACTIONS
# until the coordinator has written the previous one's markers (KAFKA-5477; a millisecond or two here).
# aiokafka retries that after a fixed 20 ms (its module constant BACKOFF_OVERRIDE, used for this case
# only), or after retry_backoff_ms (100 ms by default) when the transaction already holds a partition:
# each window's transaction would wait that long. Transactional producers retry these after 2 ms and
# everything else after 20 ms (a broker that is away is asked 50 times a second, not 500).
TXN_CONCURRENT_BACKOFF_MS, TXN_RETRY_BACKOFF_MS = 2, 20


def transactional_producer(settings: KafkaSettings, transactional_id: str, **overrides: Any) -> AIOKafkaProducer:
    """A producer whose sends and offset commits go in transactions (``slipstream.agents.transactions``). Starting
    it registers ``transactional_id`` with its coordinator: the previous producer of that id is fenced
    and its open transaction aborted (a committing one is completed first)."""
    from aiokafka.producer import sender

    sender.BACKOFF_OVERRIDE = TXN_CONCURRENT_BACKOFF_MS / 1000
    return producer(settings, transactional_id=transactional_id, **{"retry_backoff_ms": TXN_RETRY_BACKOFF_MS,
                                                                   **overrides})


async def send_offsets(prod: AIOKafkaProducer, offsets: Mapping[Any, int], group_id: str) -> None:
    """Add consumer offsets ({(topic, partition): next offset}) of ``group_id`` to the open transaction.
    aiokafka 0.14 sends TxnOffsetCommit v0: a group id only, no generation (KIP-447); fencing is by
    transactional id (one per input partition)."""
    from aiokafka import TopicPartition

    await prod.send_offsets_to_transaction({TopicPartition(tp[0], tp[1]): o for tp, o in offsets.items()},
                                           group_id)


def is_fenced(exc: BaseException) -> bool:
    """Has another producer taken this one's transactional id (so it may never commit again)? Only
    the broker's answer says so (``ProducerFenced``; ``InvalidProducerEpoch``, which aiokafka turns
    into it): a producer in aiokafka's fatal state for another reason (its sender stopped on an
    unexpected error) is not fenced, and what follows is not a stop (``slipstream.agents.transactions.decide``)."""
    from aiokafka.errors import InvalidProducerEpoch, ProducerFenced

    return isinstance(exc, (ProducerFenced, InvalidProducerEpoch))


def is_out_of_order(exc: BaseException) -> bool:
    """Refused for its sequence number, not for what it holds: the producer's numbers no longer match
    the broker's (after an earlier batch of the partition was refused); a new producer sends it."""
    from aiokafka.errors import OutOfOrderSequenceNumber

    return isinstance(exc, OutOfOrderSequenceNumber)


async def start_producer(prod: AIOKafkaProducer, timeout_s: float) -> AIOKafkaProducer:
    """``prod`` started within ``timeout_s``; on failure stopped (bounded) and the failure raised."""
    import asyncio

    try:
        await asyncio.wait_for(prod.start(), timeout_s)
    except BaseException:
        await stop_producer(prod, 1.0)
        raise
    return prod


def retire_producer(prod: AIOKafkaProducer, stopping: set, timeout_s: float) -> None:
    """Stop a replaced producer in the background (:func:`stop_producer`), its task kept in
    ``stopping`` until done (a closer awaits them)."""
    import asyncio

    task = asyncio.ensure_future(stop_producer(prod, timeout_s))
    stopping.add(task)
    task.add_done_callback(stopping.discard)


async def stop_producer(prod: AIOKafkaProducer, timeout_s: float) -> None:
    """Stop ``prod`` within ``timeout_s``, never raising. A producer whose transaction failed may hold
    batches its sender retries for ever (``stop`` waits for them): past the deadline its sender task
    is cancelled and its connections closed (private aiokafka attributes, as ``send_window``)."""
    import asyncio
    import logging

    try:
        await asyncio.wait_for(prod.stop(), timeout_s)
        return
    except Exception as exc:  # noqa: BLE001 - a fenced or broken producer may refuse to stop cleanly
        logging.getLogger(__name__).warning("stopping a producer: %r; closing it", exc)
    task = getattr(getattr(prod, "_sender", None), "sender_task", None)
    if task is not None and not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    try:
        await asyncio.wait_for(prod.client.close(), timeout_s)
    except Exception:  # noqa: BLE001 - nothing more to do
        pass


def consumer(settings: KafkaSettings, *topics: str, group_id: str | None = None,
             **overrides: Any) -> AIOKafkaConsumer:
    """Reads committed records only: outputs of an aborted or still open transaction (a worker killed
    mid-window, a fenced zombie) are never seen. Without transactions this reads exactly what
    read_uncommitted would.

    A fetch long-polls (``FETCH_MAX_WAIT_MS``): the broker answers it as soon as a record is appended,
    so the wait costs a follower no latency, only wake-ups when nothing comes (at 50 ms resting workers
    took 1.4-1.7x the CPU and the broker 1.6x: docs/results.md, runs s18). The broker
    answers a connection's requests in order, so offsets or metadata asked on a client that is
    fetching wait behind the fetch: ask them on a client of their own (``slipstream.streams.control_io``)."""
    kw = dict(group_id=group_id, auto_offset_reset="earliest", enable_auto_commit=group_id is not None,
              metadata_max_age_ms=METADATA_MAX_AGE_MS, fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
              isolation_level="read_committed")
    kw.update(overrides)
    return AIOKafkaConsumer(*topics, **settings.aiokafka_kwargs(), **kw)


async def keys_since(settings: KafkaSettings, topic: str, since_ms: int, timeout_s: float = 60.0
                     ) -> list[tuple[bytes | None, int]]:
    """(key, timestamp ms) of every committed record of ``topic`` with a timestamp at or after
    ``since_ms``, up to the end offsets (the last stable offsets) at the call; TimeoutError past
    ``timeout_s``."""
    return [(r.key, r.timestamp) for r in await records_since(settings, topic, since_ms, timeout_s)]


async def records_since(settings: KafkaSettings, topic: str, since_ms: int, timeout_s: float = 60.0) -> list:
    """Every committed record (aiokafka ``ConsumerRecord``s, values undecoded) of ``topic`` with a
    timestamp at or after ``since_ms``, up to the end offsets (the last stable offsets) at the call;
    TimeoutError past ``timeout_s``."""
    import asyncio

    cons = consumer(settings, group_id=None, enable_auto_commit=False)
    await cons.start()
    try:
        tps = await topic_partitions(cons, topic)
        cons.assign(tps)
        ends = await cons.end_offsets(tps)
        starts = await cons.offsets_for_times({tp: since_ms for tp in tps})
        todo = {tp: ends[tp] for tp in tps if starts.get(tp) is not None and starts[tp].offset < ends[tp]}
        for tp in todo:
            cons.seek(tp, starts[tp].offset)
        out: list = []
        async with asyncio.timeout(timeout_s):
            while todo:
                for tp, recs in (await cons.getmany(*todo, timeout_ms=200)).items():
                    out += [r for r in recs if r.offset < todo.get(tp, 0)]
                for tp in list(todo):
                    if await cons.position(tp) >= todo[tp]:
                        del todo[tp]
        return out
    finally:
        await cons.stop()


def headers_for(record: str, value: Record | Mapping[str, Any] | None = None) -> list[tuple[str, bytes]]:
    """A record's headers: its type, and for a whole ``InferenceRequest`` its expiry
    (``slipstream.streams.expiry``: a worker drops it expired without decoding it)."""
    out = [(SCHEMA_HEADER, record.encode())]
    if record == "InferenceRequest" and value is not None and (e := expiry.header(value)) is not None:
        out.append(e)
    return out


async def send(prod: AIOKafkaProducer, topic: str, record: str, value: Record | Mapping[str, Any],
               key: str | bytes | None = None, timestamp_ns: int | None = None, limits: Limits | None = None):
    """Encode ``value`` as ``record`` for ``topic`` (``slipstream.streams.codec.encode``: the Confluent wire format
    when a schema registry is set) and send it; returns the delivery future (await it to confirm). With
    ``limits`` a record over its topic's limit raises ``RecordTooLarge`` before the producer sees it."""
    if isinstance(key, str):
        key = key.encode()
    ts_ms = (timestamp_ns if timestamp_ns is not None else time.time_ns()) // 1_000_000
    await codec.preregister([(record, topic)])  # a registry's schema id, off the event loop
    data, headers = codec.encode(record, value, topic), headers_for(record, value)
    if limits is not None:
        limits.check(topic, key, data, headers)
    return await prod.send(topic, data, key=key, timestamp_ms=ts_ms, headers=headers)


# send_window uses aiokafka internals (``_serialize``, ``_partition``, ``client._wait_on_metadata``):
# private, so only the version pinned in constraints.txt (aiokafka==0.14.0) is known to have them as used
# here; tests/integration/test_delivery.py holds the partitions equal to ``send``'s.
async def send_window(prod: AIOKafkaProducer, records: Sequence[tuple[str, str | bytes | None, str, Record | Mapping[str, Any]]],
                      limits: Limits | None = None) -> list:
    """Encode and send many records ((topic, key, record type, value), as ``slipstream.agents.routing.Out``) with
    aiokafka's batch API: one producer batch per partition, in record order (another when one fills),
    each record on the partition ``send`` would choose (:func:`_partition_of`). Returns, per record,
    its batch's delivery future (a failed batch fails each of its records) or the exception that
    refused it before sending (encode error, over ``max_request_size``, unknown topic). Inside a
    transaction as ``send`` is (``send_batch`` adds the partition to it). With ``limits``
    (``slipstream.streams.limits``) a record over its topic's limit is refused here (``RecordTooLarge``) and a
    batch grows only as far as its topic takes."""
    ts_ms = time.time_ns() // 1_000_000
    await codec.preregister({(record, topic) for topic, _, record, _ in records})  # off the event loop
    out: list = [None] * len(records)
    batches: list[tuple[str, int, Any, list[int]]] = []  # (topic, partition, batch, its records' indexes)
    open_: dict[tuple[str, int], int] = {}  # (topic, partition) -> its open batch in ``batches``
    known: dict = {}
    single: dict[str, int] = {}
    for i, (topic, key, record, value) in enumerate(records):
        try:
            key = key.encode() if isinstance(key, str) else key
            data, headers = codec.encode(record, value, topic), headers_for(record, value)
            prod._serialize(key, data, headers)  # private: aiokafka's own size check (MessageSizeTooLargeError)
            if limits is not None:
                limits.check(topic, key, data, headers)
            p = single.get(topic)  # a one-partition topic: no hash, no await per record
            if p is None:
                p = await _partition_of(prod, topic, key, data, known, single)
        except Exception as exc:  # noqa: BLE001 - refused before sending: the caller replaces it
            out[i] = exc
            continue
        j = open_.get((topic, p))
        if j is not None and limits is not None and \
                batches[j][2].size() + Limits.size(key, data, headers) > limits.of(topic):
            j = None  # the topic would refuse the batch with this record: a new one
        if j is None or batches[j][2].append(timestamp=ts_ms, key=key, value=data, headers=headers) is None:
            batch = prod.create_batch()  # none open, or full: a new one (its first record always fits)
            batch.append(timestamp=ts_ms, key=key, value=data, headers=headers)
            j = open_[topic, p] = len(batches)
            batches.append((topic, p, batch, []))
        batches[j][3].append(i)
    for topic, p, batch, idx in batches:  # in the order they were opened: a partition's stay in order
        batch.close()  # complete: the sender takes it at once instead of after linger_ms
        try:
            fut = await prod.send_batch(batch, topic, partition=p)
        except Exception as exc:  # noqa: BLE001 - closed producer, queue timeout: each record fails
            fut = exc
        for i in idx:
            out[i] = fut
    return out


async def _partition_of(prod: AIOKafkaProducer, topic: str, key: bytes | None, data: bytes, known: dict,
                        single: dict) -> int:
    """The partition ``prod.send(topic, key=key)`` would choose (the producer's partitioner: Kafka's
    default, murmur2 of the key), computed once per (topic, key) and the topic's partitions fetched
    once (a failure too) per ``known`` (one window); a topic of one partition goes into ``single``.
    Private aiokafka calls, see above."""
    p = known.get((topic, key))
    if p is None:
        tps = known.get(topic)
        if tps is None:
            try:
                tps = await prod.client._wait_on_metadata(topic)
            except Exception as exc:  # noqa: BLE001 - an unknown topic: waited for once per window
                tps = exc
            known[topic] = tps
        if isinstance(tps, Exception):
            raise tps
        if len(tps) == 1:  # murmur2(key) % 1 is 0 for every key: the hash (Python code) is skipped
            p = single[topic] = next(iter(tps))
        else:
            p = known[topic, key] = prod._partition(topic, None, key, data, key, data)
    return p


async def topic_partitions(consumer, topic: str, *, fresh: bool = False) -> list:
    """Every partition of ``topic``: from the client's metadata, fetched first when ``fresh`` or when
    the client has not seen the topic yet. The client tracks the topic from then on: its refresh
    (every ``METADATA_MAX_AGE_MS``) asks for the topics it tracks, where a client that tracks none
    asks for every topic of the cluster (thousands on a shared one, decoded in Python)."""
    from aiokafka import TopicPartition

    parts = None if fresh else consumer.partitions_for_topic(topic)
    for _ in range(50):
        if parts:
            break
        await consumer._client.add_topic(topic)
        await consumer._client.force_metadata_update()
        parts = consumer.partitions_for_topic(topic)
    if not parts:
        raise LookupError(f"topic {topic} does not exist: create the pipeline's topics first")
    return [TopicPartition(topic, p) for p in sorted(parts)]


def is_transient(exc: BaseException) -> bool:
    """Can sending again help? Kafka's own answer where the error carries one (``retriable``, as the
    protocol defines it: a leader moving, not enough in-sync replicas, a topic or partition the
    metadata does not show yet, a lost connection), and a client-side timeout; everything else is
    permanent (a record over its topic's limit, an encode error, no authorization, a fenced or
    out-of-sequence producer). Transient is not endless: ``slipstream.agents.delivery`` bounds the retries in time."""
    from aiokafka.errors import KafkaTimeoutError

    return bool(getattr(exc, "retriable", False)) or isinstance(exc, KafkaTimeoutError)
