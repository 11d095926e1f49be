"""Limits and deadlines on the real broker, with real worker processes (``slipstream.streams.limits``,
``slipstream.streams.heartbeat``):

- an input over the dead-letter topic's limit is still dead-lettered: its bytes cut to fit, the whole
  input's size and sha256 named;
- an output over the results topic's ``max.message.bytes`` (read from the cluster, not assumed)
  becomes an ``error`` result naming its size and that limit; the worker goes on;
- a model run that hangs past its deadline gets an ``error`` result naming the deadline, later
  requests are served by a new replica, and ``/healthz`` answers 503 (200 while healthy) so the
  hung thread is freed by a restart."""
from __future__ import annotations

import asyncio
import hashlib
import re
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from slipstream.streams import admin, codec, kafka as kclient, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.spec import load_pipeline
from slipstream.streams.topics import TopicSpec

from .helpers import assert_exactly_once, read_topic
from .workers import Workers

MiB = 1024 * 1024


def noop_pipeline(name: str, folder: Path, slo_ms: int = 20000, **params) -> Path:
    doc = {"name": name, "slo_ms": slo_ms,
           "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
           "stages": [{"name": "relay", "variants": [{"name": "v", "model": "noop", "accuracy": 1.0,
                                                       "params": params}],
                       "defaults": {"max_batch": 1, "batch_timeout_ms": 1, "partitions": 1}}],
           "edges": []}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def healthz(worker) -> tuple[int, str]:
    addr = re.search(r"slipstream-worker ready .* metrics=(\S+)", "".join(worker.lines)).group(1)
    try:
        with urllib.request.urlopen(f"http://{addr}/healthz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def test_oversize_input_is_dead_lettered_cut_and_an_oversize_output_becomes_an_error_naming_the_limit(
        kafka, unique, tmp_path):
    path = noop_pipeline(unique, tmp_path)
    pipe = load_pipeline(path)
    source = topics.stage_input(pipe.name, "relay")
    # the input topic takes 4 MiB records; results and dead letters keep the broker's 1 MiB default
    await admin.ensure_topics(kafka, [TopicSpec(source, 1, {"max.message.bytes": str(4 * MiB)})])
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    workers = Workers(path, kafka.bootstrap)
    garbage = bytes(range(256)) * (2 * MiB // 256)  # 2 MiB, not Avro: dead-lettered
    try:
        workers.start("relay")
        prod = kclient.producer(kafka)
        await prod.start()
        try:
            await (await prod.send(source, garbage, key=b"garbage"))
        finally:
            await prod.stop()
        async with PipelineClient(pipe, kafka) as client:
            big = make_request(pipe, b"x" * (2 * MiB))  # fits the input topic; its result does not fit
            small = make_request(pipe, b"small")
            for req in (big, small):
                await client.send(req)
            got = {r: await client.result(r, 60) for r in (big.request_id, small.request_id)}
        letters = await read_topic(kafka, topics.dead_letters(pipe.name), 1, record="DeadLetter")
        await assert_exactly_once(kafka, pipe.name, list(got))
    finally:
        workers.stop()
    assert got[small.request_id].status == "done"
    refused = got[big.request_id]
    assert refused.status == "error", refused
    assert re.search(r"record of \d+ bytes is over the 1048588-byte limit of topic " + re.escape(topics.results(pipe.name)),
                     refused.reason), refused.reason
    (letter,) = letters
    assert letter["offset"] == 0 and len(letter["original"]) < MiB and garbage.startswith(letter["original"])
    assert f"original of {len(garbage)} bytes, sha256 {hashlib.sha256(garbage).hexdigest()}" in letter["error"]


async def test_a_hung_model_run_gets_error_results_a_new_replica_and_a_failing_healthz(kafka, unique, tmp_path):
    # run deadline: 5 s; a request's deadline at most 10 x the SLO (slipstream.streams.contract): 5 s
    path = noop_pipeline(unique, tmp_path, slo_ms=500, hang_on="HANG", hang_s=600)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    workers = Workers(path, kafka.bootstrap)
    try:
        (worker,) = workers.start("relay")
        assert healthz(worker) == (200, "ok\n")
        async with PipelineClient(pipe, kafka) as client:
            before = await client.submit(b"before", slo_ms=5000)
            assert (await client.result(before, 60)).status == "done"
            hung = await client.submit(b"HANG here", slo_ms=5000)
            results = {hung: await client.result(hung, 60)}  # at the run deadline: the replica replaced
            after = [await client.submit(f"after {i}".encode(), slo_ms=5000) for i in range(5)]
            results |= {r: await client.result(r, 60) for r in after}  # served by the new replica
        status, body = healthz(worker)
        ids = [before, hung, *after]
        await assert_exactly_once(kafka, pipe.name, ids)
    finally:
        workers.stop()
    assert results[hung].status == "error", results[hung]
    assert "past its deadline of 5 s: replica replaced" in results[hung].reason, results[hung].reason
    assert all(results[r].status == "done" for r in after), [results[r].reason for r in after]
    assert status == 503 and "model run relay/v of 1 on replica 0" in body and "past its deadline" in body, body


def metric(worker, name: str) -> float:
    addr = re.search(r"slipstream-worker ready .* metrics=(\S+)", "".join(worker.lines)).group(1)
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        m = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", r.read().decode(), re.M)
    return float(m.group(1))


async def test_windows_awaiting_a_produce_that_cannot_complete_are_bounded_and_all_answered_after(
        kafka, unique, tmp_path):
    from slipstream.agents.backlog import MAX_WINDOWS

    path = noop_pipeline(unique, tmp_path)
    pipe = load_pipeline(path)
    results = topics.results(pipe.name)
    # no results topic yet: every write to it is refused (UnknownTopicOrPartition, retriable) until it exists
    await admin.ensure_topics(kafka, [t for t in topics.all_topics(pipe) if t.name != results])
    workers = Workers(path, kafka.bootstrap)
    n = MAX_WINDOWS + 40
    try:
        (worker,) = workers.start("relay")
        prod = kclient.producer(kafka)  # a PipelineClient reads the results topic, which is not there yet
        await prod.start()
        try:
            reqs = [make_request(pipe, f"r{i}".encode()) for i in range(n)]  # windows of one (max_batch 1)
            await asyncio.gather(*[await kclient.send(prod, topics.stage_input(pipe.name, "relay"), "InferenceRequest",
                                                      r, key=r.request_id) for r in reqs])
        finally:
            await prod.stop()
        ids = [r.request_id for r in reqs]
        async with asyncio.timeout(60):  # until the backlog is full (each look is a scrape)
            while metric(worker, "slipstream_delivery_backlog_windows") < MAX_WINDOWS:
                await asyncio.sleep(0.2)
        seen = []
        # stuck: it stays at the bound; the rest waits in the queue or in a fetch the consumer holds back
        # while the backlog is full (how many were read before it filled depends on timing)
        for _ in range(10):
            seen.append((metric(worker, "slipstream_delivery_backlog_windows"),
                         metric(worker, "slipstream_queued_requests")))
            await asyncio.sleep(0.2)
        await admin.ensure_topics(kafka, [t for t in topics.all_topics(pipe) if t.name == results])
        got = await assert_exactly_once(kafka, pipe.name, ids)
    finally:
        workers.stop()
    assert all(w == MAX_WINDOWS for w, _ in seen), seen  # (backlog, queue) per look
    assert {r["status"] for r in got} == {"done"}
