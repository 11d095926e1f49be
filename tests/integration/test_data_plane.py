"""The data plane against the real broker, with real worker processes: exactly one result per
request on the results topic (none missing, none duplicated), hop timings that add up, a mid-stream
variant switch, early drops under overload, dead letters that do not stop good records, a bad
fragment that does not stop the join, and a bad result record that does not stop the client."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from slipstream.loadgen.collect import check_exactly_once
from slipstream.schemas.records import InferenceResult
from slipstream.streams import admin, codec, kafka as kclient, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.spec import load_pipeline

from .helpers import as_records, assert_exactly_once, committed_offsets, read_topic, results_of
from .workers import Workers, unique_pipeline

HERE = Path(__file__).parent
FANOUT3 = HERE / "pipelines" / "fanout3.yaml"


def fanout3_with_workers(kafka, name: str, tmp_path, env: dict[str, str] | None = None):
    """A fresh copy of fanout3 with its topics, and its workers (pre, detect, classify, join), started
    with ``env`` added to theirs; yields (pipeline, workers) and stops them."""
    path = unique_pipeline(FANOUT3, name, tmp_path)
    pipe = load_pipeline(path)
    asyncio.run(admin.ensure_topics(kafka, topics.all_topics(pipe)))
    workers = Workers(path, kafka.bootstrap, env)
    try:
        workers.start("pre", "detect", "classify", "join")
        yield pipe, workers
    finally:
        workers.stop()


@pytest.fixture
def pipeline(kafka, unique, tmp_path):
    yield from fanout3_with_workers(kafka, unique, tmp_path)


async def send_all(client: PipelineClient, pipe, n: int, **kw) -> list[str]:
    ids, futs = [], []
    for i in range(n):
        req = make_request(pipe, f"payload-{i}".encode(), **kw)
        ids.append(req.request_id)
        futs.append(await client.send(req, wait=False))
    await asyncio.gather(*futs)
    return ids


async def collect(client: PipelineClient, ids: list[str], timeout_s: float = 60.0) -> dict[str, InferenceResult]:
    """Each request's result by id; a request without one names where it went (:func:`results_of`)."""
    return dict(zip(ids, await results_of(client, ids, timeout_s)))


def chain_sum_ns(res: dict) -> int:
    """Walk back from the last hop through enqueued == parent's finished; sum hop durations."""
    by_finish = {h.finished_ns: h for h in res.hops}
    h, total = res.hops[-1], 0
    while True:
        total += h.finished_ns - h.enqueued_ns
        if h.enqueued_ns == res.created_ns:
            return total
        h = by_finish[h.enqueued_ns]  # KeyError = a hop whose parent is missing


async def test_fanout_pipeline_delivers_every_request_once_with_hops_adding_up(kafka, pipeline):
    pipe, workers = pipeline
    async with PipelineClient(pipe, kafka) as client:
        ids = await send_all(client, pipe, 60)
        results = await collect(client, ids)
    assert set(results) == set(ids)
    assert all(r.status == "done" for r in results.values()), [r.reason for r in results.values()]
    for r in results.values():
        stages = [h.stage for h in r.hops]
        assert stages[:2] == ["pre", "detect"]
        # k detections: k > 1 fragments are joined, k = 1 goes straight through, k = 0 ends at detect
        assert stages[-1] == ("join" if r.parts > 1 else "classify" if len(stages) > 2 else "detect")
        assert r.hops[-1].finished_ns == r.finished_ns
        assert chain_sum_ns(r) == r.finished_ns - r.created_ns
    assert any(r.parts > 1 for r in results.values())  # the fan-out did happen
    assert client.duplicates == 0 and client.undecodable == 0
    raw = await assert_exactly_once(kafka, pipe.name, ids)  # the whole results topic, read back
    # the check notices: this real run's results with one duplicated and one removed
    doctored = raw[1:] + [raw[-1]]
    d = check_exactly_once(as_records(doctored), ids)
    assert (d.missing, d.duplicates, d.conflicting, d.unexpected) == (
        (raw[0]["request_id"],), (raw[-1]["request_id"],), (), ())


async def publish_config(kafka, pipe, stage: str, **fields) -> int:
    """Write a StageConfig; returns its offset, which is the epoch a worker applies it with."""
    rec = {**pipe.stage(stage).defaults.to_dict(), "epoch": 1, "planner_mode": "test", **fields}
    prod = kclient.producer(kafka)
    await prod.start()
    try:
        return (await (await kclient.send(prod, topics.control(pipe.name), "StageConfig", rec, key=stage))).offset
    finally:
        await prod.stop()


def classify_variants(result: dict) -> set[str]:
    return {h.variant for h in result.hops if h.stage == "classify"}


async def test_variant_switch_mid_stream_loses_and_duplicates_nothing(kafka, pipeline):
    pipe, workers = pipeline
    async with PipelineClient(pipe, kafka) as client:
        first = await send_all(client, pipe, 40)
        await publish_config(kafka, pipe, "classify", variant="big", epoch=1)
        second = await send_all(client, pipe, 40)  # in flight while the switch happens
        probes = []
        async with asyncio.timeout(60):  # the switch lands: a result says so (an event, not a sleep)
            while True:
                rid = (await send_all(client, pipe, 1))[0]
                probes.append(rid)
                if "big" in classify_variants(await client.result(rid, 30)):
                    break
        await publish_config(kafka, pipe, "classify", variant="nope", epoch=2)  # rejected: unknown
        await publish_config(kafka, pipe, "classify", variant="small", epoch=2**63 - 1)  # invalid: epoch
        third = await send_all(client, pipe, 40)
        ids = first + second + probes + third
        results = await collect(client, ids)
        assert client.duplicates == 0
    assert set(results) == set(ids)
    assert all(r.status == "done" for r in results.values())
    variants = [classify_variants(results[i]) for i in third]
    assert all(v == {"big"} for v in variants if v), variants  # the rejected configs changed nothing
    await assert_exactly_once(kafka, pipe.name, ids)


async def test_overload_drops_doomed_requests_with_a_reason_instead_of_late(kafka, unique, tmp_path):
    # one slow classify worker, max batch 2, a 150 ms SLO and a burst of 150 requests at once
    import yaml
    doc = yaml.safe_load(FANOUT3.read_text())
    for s in doc["stages"]:
        if s["name"] == "classify":
            s["variants"][0]["params"] = {"width": 2048, "depth": 6, "seed": 2}
            s["defaults"]["max_batch"] = 2
    src = tmp_path / "slow.yaml"
    src.write_text(yaml.safe_dump(doc))
    path = unique_pipeline(src, unique, tmp_path, slo_ms=150)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    workers = Workers(path, kafka.bootstrap)
    try:
        workers.start("pre", "detect", "classify", "join")
        async with PipelineClient(pipe, kafka) as client:
            ids = await send_all(client, pipe, 150)
            results = await collect(client, ids, timeout_s=120)
    finally:
        workers.stop()
    await assert_exactly_once(kafka, pipe.name, ids)
    statuses = [r.status for r in results.values()]
    dropped = [r for r in results.values() if r.status == "dropped"]
    assert set(results) == set(ids) and "error" not in statuses
    assert dropped, "a burst far beyond capacity must drop doomed requests"
    assert all("deadline" in r.reason for r in dropped)
    done = [r for r in results.values() if r.status == "done"]
    late = [r for r in done if r.finished_ns > r.deadline_ns]
    # a prediction is a p99, not a promise: allow a few late ones, never most of them
    assert len(late) <= max(3, 0.1 * len(done)), (len(late), len(done))


async def test_garbage_goes_to_dead_letters_while_good_records_flow(kafka, pipeline):
    pipe, workers = pipeline
    src = topics.stage_input(pipe.name, pipe.source)
    async with PipelineClient(pipe, kafka) as client:
        before = await send_all(client, pipe, 10)
        prod = kclient.producer(kafka)
        await prod.start()
        try:
            await (await prod.send(src, b"this is not avro", key=b"junk"))
            await (await prod.send(src, codec.encode("DeadLetter", {
                "original": b"", "topic": "x", "partition": 0, "offset": 0, "error": "wrong type"})))
        finally:
            await prod.stop()
        after = await send_all(client, pipe, 10)
        results = await collect(client, before + after)
    assert all(r.status == "done" for r in results.values())
    await assert_exactly_once(kafka, pipe.name, before + after)
    dead = await read_topic(kafka, topics.dead_letters(pipe.name), min_count=2, record="DeadLetter")
    assert len(dead) == 2  # on different partitions (different keys): in no particular order
    (junk,) = [d for d in dead if d["original"] == b"this is not avro"]
    (other,) = [d for d in dead if d is not junk]
    assert junk["topic"] == src and "single-object header" in junk["error"] and junk["stage"] == "pre"
    assert other["error"] and other["stage"] == "pre"  # a record of another type is named, not swallowed


def fragment(pipe, rid: str, share: str, path: list[str]) -> dict:
    now = time.time_ns()
    return {"request_id": rid, "pipeline": pipe.name, "status": "done", "reason": "", "created_ns": now,
            "deadline_ns": now + 10**9 * 60, "finished_ns": now, "content_type": "text/plain",
            "output": b"x", "hops": [], "accuracy": 1.0, "parts": 1, "fragment": share, "path": path}


async def test_bad_fragments_at_the_join_end_as_dead_letters_or_errors_and_the_join_keeps_committing(
        kafka, pipeline):
    pipe, workers = pipeline
    join_topic = topics.join(pipe.name)
    async with PipelineClient(pipe, kafka) as client:
        prod = kclient.producer(kafka)
        await prod.start()
        try:
            await (await prod.send(join_topic, b"not a fragment", key=b"junk"))
            for rec in (fragment(pipe, "bad-share", "one half", ["d:0/2"]),  # not a fraction
                        fragment(pipe, "over", "2/3", ["d:0/3"]),  # two fan-outs of one request
                        fragment(pipe, "over", "2/3", ["d:1/3"])):
                await (await kclient.send(prod, join_topic, "InferenceResult", rec, key=rec["request_id"]))
        finally:
            await prod.stop()
        over = await client.result("over", 60)
        ids = await send_all(client, pipe, 30)  # the join still joins
        results = await collect(client, ids)
    assert over.status == "error" and "4/3 > 1" in over.reason, over
    assert all(r.status == "done" for r in results.values())
    assert any(r.parts > 1 for r in results.values())
    await assert_exactly_once(kafka, pipe.name, ids + ["over"])  # none for "bad-share"
    dead = await read_topic(kafka, topics.dead_letters(pipe.name), min_count=2, record="DeadLetter")
    assert sorted(d["stage"] for d in dead) == ["join", "join"]
    assert {d["original"] for d in dead} >= {b"not a fragment"}
    assert any("request bad-share" in d["error"] and "not a fraction" in d["error"] for d in dead), dead
    # and it commits: every fragment on the join topic is acked and committed, bad ones included
    group = topics.consumer_group(pipe.name, "join")
    async with asyncio.timeout(30):
        while True:
            offsets = await committed_offsets(kafka, group, join_topic)
            if all(c == end for c, end in offsets.values()):
                break
            await asyncio.sleep(0.5)  # faust commits on its own timer: poll the broker


async def test_client_skips_an_undecodable_result_record_and_other_clients_results(kafka, pipeline):
    pipe, workers = pipeline
    res_topic = topics.results(pipe.name)
    (parts,) = (await admin.partition_counts(kafka, [res_topic])).values()
    async with PipelineClient(pipe, kafka) as client:
        probes = [client.expect(f"probe-{p}") for p in range(parts)]
        prod = kclient.producer(kafka)
        await prod.start()
        try:  # per partition: garbage, another client's result, then a result this client waits for
            for p in range(parts):
                await (await prod.send(res_topic, b"garbage", partition=p))
                for rid in (f"someone-elses-{p}", f"probe-{p}"):
                    await (await prod.send(res_topic, codec.encode("InferenceResult", fragment(pipe, rid, "1", [])),
                                           key=rid.encode(), partition=p))
        finally:
            await prod.stop()
        async with asyncio.timeout(30):  # each probe comes after its partition's garbage
            assert all(r.status == "done" for r in await asyncio.gather(*probes))
        assert client.undecodable == parts
        ids = await send_all(client, pipe, 10)
        results = await collect(client, ids)
        assert set(client.results) == set(ids) | {f"probe-{p}" for p in range(parts)}  # only its own
    assert all(r.status == "done" for r in results.values())
