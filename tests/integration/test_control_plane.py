"""The control topic cannot be poisoned, on the real broker with real worker processes: a record whose
key is not UTF-8, a StageConfig with the largest epoch Avro allows, undecodable bytes, an unknown
variant and an unknown record type are skipped (logged with their offset, counted); every worker keeps
running, every request is answered once, and a valid config written after them takes effect. The
tuner, reading the same topic, still publishes; and two writers that write the same ``epoch`` field
(the planner and the tuner racing) are both applied, in the order they were written."""
from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import yaml

from slipstream.streams import admin, kafka as kclient, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.control_io import KafkaPublisher
from slipstream.streams.spec import load_pipeline
from slipstream.tuner.service import stage_config_record

from .helpers import assert_exactly_once
from .workers import Workers

EPOCH_MAX = 2**63 - 1


def two_variant_pipeline(name: str, folder: Path) -> Path:
    """One stage of two no-op variants; a result's last hop names the variant that served it."""
    doc = {"name": name, "slo_ms": 20000,
           "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
           "stages": [{"name": "s",
                       "variants": [{"name": "a", "model": "noop", "accuracy": 0.5},
                                    {"name": "b", "model": "noop", "accuracy": 0.9}],
                       "defaults": {"variant": "a", "max_batch": 4, "batch_timeout_ms": 1, "partitions": 2,
                                    "replicas": 2}}],
           "edges": []}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


async def write_raw(kafka, topic: str, *records: tuple[bytes | None, bytes, str]) -> None:
    """(key, value, schema header) records, as a careless or hostile client would write them."""
    prod = kclient.producer(kafka)
    await prod.start()
    try:
        for key, value, kind in records:
            await (await prod.send(topic, value, key=key, headers=kclient.headers_for(kind)))
    finally:
        await prod.stop()


async def served_by(client: PipelineClient, pipe, variant: str, rounds: int = 20) -> tuple[list[str], dict]:
    """Send rounds of requests until one is served by ``variant`` (a config taking effect is seen
    through the results, bounded); returns every id sent and every result."""
    ids, results = [], {}
    for _ in range(rounds):
        sent = []
        for _ in range(10):
            req = make_request(pipe, b"x")
            sent.append(req.request_id)
            await client.send(req)
        ids += sent
        results.update({rid: await client.result(rid, 60) for rid in sent})
        if any(r.hops and r.hops[-1].variant == variant for r in results.values()):
            break
    return ids, results


async def test_poisoned_control_records_are_skipped_and_every_worker_keeps_serving(kafka, unique, tmp_path):
    path = two_variant_pipeline(unique, tmp_path)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    control = topics.control(pipe.name)
    from slipstream.streams import codec

    huge = replace(stage_config_record(pipe, None, "s", 2, 2, "poison: the largest epoch"), epoch=EPOCH_MAX)
    unknown = replace(stage_config_record(pipe, None, "s", 2, 2, "poison: unknown variant"), variant="zzz")
    await write_raw(kafka, control,
                    (b"\xff\xfe", codec.encode("StageConfig", replace(huge, reason="bad key")), "StageConfig"),
                    (b"s", codec.encode("StageConfig", huge), "StageConfig"),
                    (b"s", b"\xc3\x01garbage", "StageConfig"),
                    (b"s", codec.encode("StageConfig", unknown), "StageConfig"),
                    (b"s", codec.encode("StageConfig", huge), "NoSuchRecord"))
    workers = Workers(path, kafka.bootstrap)
    try:
        running = workers.start("s", "s")
        pub = KafkaPublisher(kafka, pipe.name)
        await pub.start()
        try:  # after the poison, a valid config from the tuner's writer: everything to variant b
            await pub.publish(control, "StageConfig",
                              replace(stage_config_record(pipe, None, "s", 2, 2, "test: to b"), variant="b"), "s")
        finally:
            await pub.stop()
        async with PipelineClient(pipe, kafka) as client:
            ids, results = await served_by(client, pipe, "b")
        await assert_exactly_once(kafka, pipe.name, ids)
        assert any(r.hops[-1].variant == "b" for r in results.values()), \
            "the valid config written after the poison never took effect"
        assert [w.proc.poll() for w in running] == [None, None], "a worker exited:\n" + "".join(
            running[0].lines[-20:] + running[1].lines[-20:])
        logged = "".join(running[0].lines + running[1].lines)
        assert "not UTF-8" in logged and "epoch" in logged and "unknown variant 'zzz'" in logged, logged[-3000:]
    finally:
        workers.stop()


async def test_the_tuner_reads_past_a_poisoned_epoch_and_equal_written_epochs_apply_in_write_order(
        kafka, unique, tmp_path):
    from slipstream.streams import codec
    from slipstream.streams.control_io import KafkaArrivals
    from slipstream.tuner.actuators import DryRunActuator
    from slipstream.tuner.policy import StageChange, StageSizing, TunerConfig, TunerPlan
    from slipstream.tuner.service import TunerService

    path = two_variant_pipeline(unique, tmp_path)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    control = topics.control(pipe.name)
    huge = replace(stage_config_record(pipe, None, "s", 2, 2, "poison: the largest epoch"), epoch=EPOCH_MAX)
    await write_raw(kafka, control, (b"s", codec.encode("StageConfig", huge), "StageConfig"))
    # the race of the planner and the tuner: both write the same epoch field, the later one must win
    planner_rec = replace(stage_config_record(pipe, None, "s", 2, 2, "planner"), epoch=5, variant="a")
    tuner_rec = replace(stage_config_record(pipe, None, "s", 2, 2, "tuner"), epoch=5, variant="b")
    pub = KafkaPublisher(kafka, pipe.name)
    await pub.start()
    workers = Workers(path, kafka.bootstrap)
    try:
        first = await pub.publish(control, "StageConfig", planner_rec, "s")
        second = await pub.publish(control, "StageConfig", tuner_rec, "s")
        assert second > first
        plan = TunerPlan.from_sample(list(range(100)), (1.0,), (StageSizing("s", 2, 25.0, 1.0),))
        service = TunerService(pipe, plan, TunerConfig(), DryRunActuator(), partitions={"s": 2},
                               publish=pub.publish)
        seen = asyncio.Event()

        def on_config(rec) -> None:
            service.on_stage_config(rec)
            if rec.epoch == second:
                seen.set()

        arrivals = KafkaArrivals(kafka, pipe.name, "s", on_stage_config=on_config, spec=pipe, lookback_s=0)
        await arrivals.start()
        reader = asyncio.create_task(anext(aiter(arrivals)))  # reads the control topic as it polls
        try:
            await asyncio.wait_for(seen.wait(), 30)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await arrivals.stop()
        await service._apply(StageChange("s", 2, 2, "scale-up", None, 40.0, 20.0), 0)
        published = service.latest_configs["s"]
        assert published.variant == "b" and 0 < published.epoch <= EPOCH_MAX // 2**10
        (running,) = workers.start("s")
        async with PipelineClient(pipe, kafka) as client:
            ids, results = await served_by(client, pipe, "b")
        await assert_exactly_once(kafka, pipe.name, ids)
        assert any(r.hops[-1].variant == "b" for r in results.values()), \
            "the later of two configs with the same epoch field never took effect"
        assert running.proc.poll() is None
    finally:
        await pub.stop()
        workers.stop()


async def test_a_worker_started_after_many_configs_loads_only_the_newest(kafka, unique, tmp_path):
    """Compaction keeps only the latest config per stage, eventually: a worker that starts while the
    topic still holds older ones starts with the newest, and never puts an older one in force."""
    path = two_variant_pipeline(unique, tmp_path)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    control = topics.control(pipe.name)
    pub = KafkaPublisher(kafka, pipe.name)
    await pub.start()
    try:
        epochs = [await pub.publish(control, "StageConfig",
                                    replace(stage_config_record(pipe, None, "s", 1, 2, f"test: {i}"),
                                            variant="ab"[i % 2], max_batch=1 + i % 3), "s") for i in range(6)]
    finally:
        await pub.stop()
    workers = Workers(path, kafka.bootstrap)
    try:
        (worker,) = workers.start("s")
        async with PipelineClient(pipe, kafka) as client:
            ids = []
            for _ in range(10):
                req = make_request(pipe, b"x")
                ids.append(req.request_id)
                await client.send(req)
            results = {rid: await client.result(rid, 60) for rid in ids}
        assert {r.hops[-1].variant for r in results.values()} == {"b"}, "served before the newest config"
        logged = "".join(worker.lines)
        assert f"config epoch {epochs[-1]} in force at start" in logged, logged[-3000:]
        older = [e for e in epochs[:-1] if f"config epoch {e} in force" in logged]
        assert not older, f"older configs put in force: {older}"
    finally:
        workers.stop()
