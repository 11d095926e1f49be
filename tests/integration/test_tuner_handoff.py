"""The tuner's plan from the control topic (no plan file): the reader returns the planner's latest
TunerHandoff, never a StageConfig on the same topic, waits for a first one, and `slipstream tuner`
without --plan says clearly when none comes."""
from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import yaml
from click.testing import CliRunner

from slipstream.commands.tuner import tuner_cmd
from slipstream.schemas.records import TunerHandoff
from slipstream.streams import admin, topics
from slipstream.streams.control_io import KafkaPublisher, latest_epoch, latest_handoff
from slipstream.streams.spec import parse_pipeline
from slipstream.tuner import planfile
from slipstream.tuner.envelope import doubling_windows
from slipstream.tuner.policy import StageSizing, TunerPlan
from slipstream.tuner.service import stage_config_record

from .test_tuner import spec


def handoff(name: str, epoch: int, replicas: int) -> dict:
    """A TunerHandoff record as the planner publishes it (planfile's document plus epoch and at_ns)."""
    sample = np.cumsum(np.random.default_rng(epoch).exponential(1 / 20, 2000))
    plan = TunerPlan.from_sample(sample, doubling_windows(0.05), (StageSizing("src", replicas, 25.0, 1.0),))
    return planfile.to_dict(plan, name) | {"epoch": epoch, "at_ns": 1_000 * epoch}


async def publish(kafka, name: str, *records: tuple[str, object]) -> None:
    pub = KafkaPublisher(kafka, name)
    await pub.start()
    try:
        for kind, rec in records:
            await pub.publish(topics.control(name), kind, rec, key=topics.HANDOFF_KEY if kind == "TunerHandoff"
                              else rec.stage)
    finally:
        await pub.stop()


async def fresh(kafka, name: str):
    pipe = parse_pipeline(spec(name))
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    return pipe


async def test_the_latest_handoff_is_read_and_a_stage_config_is_never_taken_for_one(kafka, unique):
    pipe = await fresh(kafka, unique)
    config = stage_config_record(pipe, None, "src", replicas=3, partitions=2, reason="test")  # epoch 1
    assert await latest_handoff(kafka, unique) is None
    await publish(kafka, unique, ("StageConfig", config))
    assert await latest_handoff(kafka, unique) is None  # a StageConfig only: no hand-off
    first, second = handoff(unique, 1, 1), handoff(unique, 2, 2)
    later_config = replace(config, epoch=7)
    await publish(kafka, unique, ("TunerHandoff", first), ("TunerHandoff", second), ("StageConfig", later_config))
    got = await latest_handoff(kafka, unique)
    assert got == TunerHandoff.from_dict(second | {"epoch": 2})  # read from the topic, its epoch is its offset
    assert planfile.from_handoff(got, pipeline=pipe).planned_replicas == {"src": 2}
    assert await latest_epoch(kafka, unique) == 3  # the offset of later_config, not its field (7), and
    # the epoch reader takes StageConfigs only


async def test_without_a_handoff_the_reader_waits_for_the_first(kafka, unique):
    await fresh(kafka, unique)
    waiting = asyncio.Event()
    record = handoff(unique, 1, 2)

    async def planner() -> None:  # publishes once the reader says it waits
        await waiting.wait()
        await publish(kafka, unique, ("TunerHandoff", record))

    task = asyncio.create_task(planner())
    got = await latest_handoff(kafka, unique, wait_s=60, on_wait=lambda topic, w: waiting.set())
    await task
    assert got == TunerHandoff.from_dict(record | {"epoch": 0})  # its offset


async def test_without_a_handoff_the_reader_gives_up_after_the_wait(kafka, unique):
    await fresh(kafka, unique)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await latest_handoff(kafka, unique, wait_s=1.0) is None
    assert 1.0 <= loop.time() - t0 < 15


def test_tuner_without_plan_waits_then_says_why(kafka, unique, tmp_path, monkeypatch):
    asyncio.run(fresh(kafka, unique))
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(spec(unique)))
    monkeypatch.setenv("SLIPSTREAM_BOOTSTRAP", kafka.bootstrap)
    r = CliRunner().invoke(tuner_cmd, ["--pipeline", str(path), "--dry-run", "--wait-plan-s", "1"])
    assert r.exit_code == 1, r.output
    assert "waiting up to 1 s" in r.output and "no planner hand-off" in r.output and "--plan FILE" in r.output
