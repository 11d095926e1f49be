"""A window's outputs go out as one producer batch per partition (``slipstream.streams.kafka.send_window``,
``slipstream.agents.delivery.Delivery``), on the real broker: each record lands on the partition ``send`` picks
(Kafka's default partitioner: the join relies on all fragments of a request sharing one), in order; a
record refused before sending comes back as its own error while the rest is delivered; records
refused for a while (a transient error: Kafka's ``retriable`` flag) are sent again until each is in
Kafka, but not for longer than the retry bound, past which each is replaced by an error result; and
each record of a batch the broker refuses for good is replaced by an error result for its request."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aiokafka.errors import MessageSizeTooLargeError

from slipstream.agents.delivery import Delivery
from slipstream.agents.routing import Out
from slipstream.schemas.records import InferenceRequest
from slipstream.streams import admin, kafka as kclient, topics
from slipstream.streams.client import make_request
from slipstream.streams.codec import CodecError
from slipstream.streams.spec import parse_pipeline
from slipstream.streams.topics import TopicSpec

from .helpers import drain, read_topic

SPEC = {"name": "p", "slo_ms": 100, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
        "stages": [{"name": "s", "variants": [{"name": "v", "model": "noop", "accuracy": 1.0}]}], "edges": []}
PIPE = parse_pipeline(SPEC)


def letter(key: str, original: bytes = b"x") -> dict:
    return {"original": original, "topic": "in", "partition": 0, "offset": 0, "error": key, "stage": "s",
            "at_ns": 0}


async def test_a_window_lands_on_the_partitions_send_picks_in_order_and_refusals_stay_its_own(kafka, unique):
    batched, single = f"{unique}-batched", f"{unique}-single"
    await admin.ensure_topics(kafka, [TopicSpec(batched, 5), TopicSpec(single, 5)])
    keys = [f"request-{i}" for i in range(300)]
    prod = kclient.producer(kafka, max_request_size=1_000_000)
    await prod.start()
    try:
        records = [(batched, k, "DeadLetter", letter(k)) for k in keys]
        records[100:100] = [(batched, "big", "DeadLetter", letter("big", b"x" * 1_100_000)),
                            (batched, "bad", "DeadLetter", {"original": 5})]
        futs = await kclient.send_window(prod, records)
        assert isinstance(futs[100], MessageSizeTooLargeError) and isinstance(futs[101], CodecError)
        await asyncio.gather(*futs[:100], *futs[102:])
        await asyncio.gather(*[await kclient.send(prod, single, "DeadLetter", letter(k), key=k) for k in keys])
    finally:
        await prod.stop()
    got_batched = await drain(kafka, batched, len(keys))
    got_single = await drain(kafka, single, len(keys))
    where = {m.key.decode(): m.partition for m in got_batched}
    assert where == {m.key.decode(): m.partition for m in got_single}
    assert len(set(where.values())) == 5  # the keys do spread: the check is not vacuous
    for p in range(5):  # each partition holds its keys in the window's order
        in_part = sorted((m for m in got_batched if m.partition == p), key=lambda m: m.offset)
        assert [m.key.decode() for m in in_part] == [k for k in keys if where[k] == p]


async def test_records_refused_for_a_while_are_sent_again_until_every_one_is_in_kafka(kafka, unique):
    topic = f"{unique}-late"  # not there yet (the broker creates no topic on its own): UnknownTopicOrPartition,
    # retriable in Kafka's protocol (metadata may lag a topic's creation)
    failures: list[str] = []
    retried = asyncio.Event()

    def on_failure(kind: str) -> None:
        failures.append(kind)
        retried.set()

    prod = kclient.producer(kafka, request_timeout_ms=1000)
    await prod.start()
    try:
        keys = [f"k{i}" for i in range(20)]
        d = Delivery(prod, PIPE, "s", on_failure, max_backoff_s=0.5)
        sent = await d.send_all([(Out(topic, k, "DeadLetter", letter(k)), None) for k in keys])
        settled = asyncio.ensure_future(d.settle(sent))
        await asyncio.wait_for(retried.wait(), 60)
        assert not settled.done()
        await admin.ensure_topics(kafka, [TopicSpec(topic, 3)])
        await asyncio.wait_for(settled, 60)
    finally:
        await prod.stop()
    assert set(failures) == {"retried"}, failures
    got = await drain(kafka, topic, len(keys))
    assert sorted(m.key.decode() for m in got) == sorted(keys)


async def test_records_refused_past_the_retry_bound_are_replaced_by_error_results(kafka, unique):
    pipe = parse_pipeline({**SPEC, "name": unique})
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    never = f"{unique}-never"  # never created: refused (transiently, says Kafka) for as long as one asks
    reqs = [make_request(pipe, b"x") for _ in range(3)]
    items = [SimpleNamespace(req=r, record=None) for r in reqs]
    failures: list[str] = []
    prod = kclient.producer(kafka, request_timeout_ms=1000)
    await prod.start()
    try:
        d = Delivery(prod, pipe, "s", failures.append, max_backoff_s=0.5, retry_for_s=3)
        sent = await d.send_all([(Out(never, r.request_id, "InferenceRequest", r), it) for r, it in zip(reqs, items)])
        lost = await asyncio.wait_for(d.settle(sent), 60)
    finally:
        await prod.stop()
    assert lost == [] and failures.count("replaced") == len(reqs) and "retried" in failures, failures
    results = await read_topic(kafka, topics.results(pipe.name), len(reqs))
    assert sorted(r["request_id"] for r in results) == sorted(r.request_id for r in reqs)
    assert all(r["status"] == "error" and f"cannot deliver InferenceRequest to {never}" in r["reason"]
               and "not delivered within 3 s" in r["reason"] for r in results), results[0]["reason"]


async def test_a_batch_the_broker_refuses_has_each_record_replaced_by_an_error_result(kafka, unique):
    pipe = parse_pipeline({**SPEC, "name": unique})
    narrow = f"{unique}-narrow"  # each record fits, the window's batch of 30 does not
    await admin.ensure_topics(kafka, [*topics.all_topics(pipe), TopicSpec(narrow, 1, {"max.message.bytes": "2000"})])
    failures: list[str] = []
    reqs = [make_request(pipe, b"x" * 20) for _ in range(30)]
    items = [SimpleNamespace(req=r, record=None) for r in reqs]
    prod = kclient.producer(kafka)
    await prod.start()
    try:
        d = Delivery(prod, pipe, "s", failures.append)
        sent = await d.send_all([(Out(narrow, r.request_id, "InferenceRequest", r), it)
                                 for r, it in zip(reqs, items)])
        assert len({id(s.fut) for s in sent}) == 1 and all(s.error is None for s in sent)
        await asyncio.wait_for(d.settle(sent), 60)
    finally:
        await prod.stop()
    assert failures == ["replaced"] * len(reqs)
    results = await read_topic(kafka, topics.results(pipe.name), len(reqs))
    assert sorted(r["request_id"] for r in results) == sorted(r.request_id for r in reqs)
    assert all(r["status"] == "error" and f"cannot deliver InferenceRequest to {narrow}" in r["reason"]
               and "TooLarge" in r["reason"] for r in results), results[0]["reason"]


async def test_windows_handed_over_together_go_out_together_and_a_cancelled_caller_stops_no_other(kafka, unique):
    topic = f"{unique}-together"
    await admin.ensure_topics(kafka, [TopicSpec(topic, 1)])
    windows = [[(Out(topic, k, "DeadLetter", letter(k)), None) for k in (f"w{w}-{i}" for i in range(10))]
               for w in range(3)]
    prod = kclient.producer(kafka)
    await prod.start()
    try:
        d = Delivery(prod, PIPE, "s")
        calls = [asyncio.ensure_future(d.send_all(w)) for w in windows]
        await asyncio.sleep(0)  # a yield, not a wait: each call has queued its window, the sender not yet run
        calls[1].cancel()
        first, third = await asyncio.wait_for(asyncio.gather(calls[0], calls[2]), 60)
        assert [s.out for s in first + third] == [o for w in (windows[0], windows[2]) for o, _ in w]
        assert len({id(s.fut) for s in first + third}) == 1  # one batch: the three windows went out together
        await d.settle(first + third)
    finally:
        await prod.stop()
    got = await drain(kafka, topic, 30)  # the cancelled caller's window was sent all the same
    assert [m.key.decode() for m in got] == [o.key for w in windows for o, _ in w]


async def test_after_the_broker_refuses_a_batch_the_producer_is_replaced_and_later_records_go_through(kafka, unique):
    pipe = parse_pipeline({**SPEC, "name": unique})
    narrow = f"{unique}-narrow"  # one partition: the refused batch and the later record share it
    await admin.ensure_topics(kafka, [*topics.all_topics(pipe), TopicSpec(narrow, 1, {"max.message.bytes": "2000"})])
    first, big, small = make_request(pipe, b"w"), make_request(pipe, b"x" * 5000), make_request(pipe, b"y")
    failures: list[str] = []
    d = await Delivery.started(kafka, pipe, "s", failures.append)  # no limits: the broker refuses, not send_window

    async def deliver(req: InferenceRequest) -> list[int]:
        sent = await d.send_all([(Out(narrow, req.request_id, "InferenceRequest", req),
                                  SimpleNamespace(req=req, record=None))])
        return await asyncio.wait_for(d.settle(sent), 60)
    try:
        assert await deliver(first) == []  # the broker now knows the producer's sequence on the partition
        assert await deliver(big) == []
        assert await deliver(small) == []  # the old producer's next batch would be out of sequence
    finally:
        await d.close()
    assert failures == ["producer-replaced", "replaced"], failures
    assert [r["request_id"] for r in await read_topic(kafka, narrow, 2, "InferenceRequest")] == \
        [first.request_id, small.request_id]
    (res,) = await read_topic(kafka, topics.results(pipe.name), 1)
    assert res["request_id"] == big.request_id and res["status"] == "error" and "TooLarge" in res["reason"]
