"""The service shell: feed -> decide -> grow partitions -> actuate -> publish, with an injected clock.

Records are encoded with the real Avro codec, so a field the schema does not accept fails here."""
from __future__ import annotations

from dataclasses import replace

import asyncio

import numpy as np
import pytest

from slipstream.schemas.records import StageConfig
from slipstream.streams import codec, topics
from slipstream.streams.spec import parse_pipeline
from slipstream.tuner import planfile
from slipstream.tuner.actuators import DryRunActuator
from slipstream.tuner.envelope import NS_PER_S
from slipstream.tuner.metrics import TunerMetrics
from slipstream.tuner.policy import TunerConfig
from slipstream.tuner.service import ServiceSettings, TunerService

SPEC = {
    "name": "shop", "slo_ms": 300,
    "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
    "stages": [
        {"name": "detect", "variants": [{"name": "v", "model": "m", "accuracy": 0.9}],
         "defaults": {"variant": "v", "hardware": "cpu-1", "max_batch": 4, "replicas": 2, "partitions": 2}},
        {"name": "classify", "variants": [{"name": "w", "model": "m2", "accuracy": 0.8}],
         "defaults": {"variant": "w", "hardware": "cpu-1", "max_batch": 8, "replicas": 1, "partitions": 4}},
    ],
    "edges": [{"from": "detect", "to": "classify", "fanout": 2.0, "probability": 0.5}],
}


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def poisson_ns(rate: float, start_s: float, seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = start_s + np.cumsum(rng.exponential(1 / rate, int(rate * seconds * 1.3) + 20))
    return np.round(t[t < start_s + seconds] * NS_PER_S).astype(np.int64)


@pytest.fixture
def setup():
    pipe = parse_pipeline(SPEC)
    sample = poisson_ns(50, 0, 300, seed=1) / NS_PER_S
    plan = planfile.plan_for_pipeline(pipe, sample, {"detect": 20.0, "classify": 30.0}, service_time_s=0.05)
    return pipe, plan


def test_plan_file_round_trip_and_validation(setup, tmp_path):
    pipe, plan = setup
    assert [s.visit_ratio for s in plan.stages] == [1.0, 1.0]  # fanout 2 x probability 0.5
    path = tmp_path / "plan.json"
    planfile.save(plan, pipe.name, path)
    assert planfile.load(path, pipeline=pipe) == plan
    doc = planfile.to_dict(plan, pipe.name)
    doc["stages"][0]["stage"] = "nope"
    with pytest.raises(planfile.PlanFileError, match="nope"):
        planfile.from_dict(doc, pipeline=pipe)
    with pytest.raises(planfile.PlanFileError, match="mean_rate_qps"):
        planfile.from_dict({k: v for k, v in planfile.to_dict(plan, "shop").items() if k != "mean_rate_qps"})


async def test_rate_step_grows_partitions_scales_and_publishes(setup):
    pipe, plan = setup
    clock = Clock()
    published, grown = [], []

    async def publish(topic, record, value, key):
        published.append((topic, record, codec.decode(record, codec.encode(record, value)), key))

    async def grow(topic, n):
        grown.append((topic, n))
        return n

    act = DryRunActuator()
    from prometheus_client import CollectorRegistry
    reg = CollectorRegistry()
    svc = TunerService(pipe, plan, TunerConfig(activation_s=1.0), act, partitions={"detect": 2, "classify": 4},
                       publish=publish, grow=grow, metrics=TunerMetrics(pipe.name, reg),
                       settings=ServiceSettings(reorder_s=0.0), clock=clock)
    svc.on_stage_config(StageConfig(pipeline="shop", stage="detect", variant="v", hardware="cpu-1",
                                    max_batch=16, batch_timeout_ms=5.0, replicas=3, partitions=2, epoch=7,
                                    planner_mode="milp", predicted_p99_ms=120.0, routing={}, cost_per_hour=0.15,
                                    reason="plan"))
    svc.feed(poisson_ns(50, 0, 10, seed=2))
    clock.ns = 10 * NS_PER_S
    decision = await svc.tick()
    assert not decision.changes and not published
    svc.feed(poisson_ns(150, 10, 3, seed=3))  # three times the planned rate
    clock.ns = 13 * NS_PER_S
    decision = await svc.tick()
    targets = dict(decision.targets)
    assert targets["detect"] >= 5 and targets["classify"] >= 2
    assert act.counts == {k: v for k, v in targets.items() if v != plan.planned_replicas[k]}
    assert (topics.stage_input("shop", "detect"), 8) in grown  # 2 partitions cannot hold 5+ replicas
    configs = [p for p in published if p[1] == "StageConfig"]
    actions = [p for p in published if p[1] == "ScalingAction"]
    assert {c[3] for c in configs} == {c.stage for c in decision.changes}
    det = next(c[2] for c in configs if c[3] == "detect")
    assert det["max_batch"] == 16 and det["planner_mode"] == "milp"  # the planner's config, kept
    assert det["epoch"] == 8 and det["replicas"] == targets["detect"] and det["partitions"] == 8
    assert det["cost_per_hour"] == pytest.approx(0.05 * targets["detect"])
    cls = next(c[2] for c in configs if c[3] == "classify")
    assert cls["max_batch"] == 8 and cls["epoch"] == 0  # from the spec defaults (epoch -1)
    act_rec = next(a[2] for a in actions if a[3] == "detect")
    assert act_rec["previous_replicas"] == 2 and act_rec["window_s"] is not None
    assert act_rec["live_rate_qps"] > act_rec["planned_rate_qps"] and act_rec["at_ns"] == 13 * NS_PER_S
    assert all(p[0] in (topics.control("shop"), topics.scaling("shop")) for p in published)
    assert reg.get_sample_value("slipstream_tuner_replicas", {"pipeline": "shop", "stage": "detect"}) == targets["detect"]
    assert reg.get_sample_value("slipstream_tuner_scaling_actions_total",
                                {"pipeline": "shop", "stage": "detect", "direction": "up"}) == 1
    assert reg.get_sample_value("slipstream_tuner_partitions", {"pipeline": "shop", "stage": "detect"}) == 8


async def test_run_feeds_a_source_and_decides_until_stopped(setup):
    pipe, plan = setup
    clock = Clock()
    chunks = [poisson_ns(50, s, 1, seed=s) for s in range(5)]
    stop = asyncio.Event()

    async def source():
        for c in chunks:
            clock.ns = int(c[-1])
            yield c
            await asyncio.sleep(0)
        await stop.wait()  # a live source never ends

    decisions = []

    def on_decision(d):
        decisions.append(d)
        if len(decisions) == 3:
            stop.set()

    svc = TunerService(pipe, plan, TunerConfig(), DryRunActuator(), partitions={},
                       settings=ServiceSettings(interval_s=0.01, reorder_s=0.0), clock=clock)
    await asyncio.wait_for(svc.run(source(), stop, on_decision), 5)
    assert len(decisions) == 3 and svc.tracker.arrivals == sum(c.size for c in chunks)


def test_plan_from_the_planners_handoff_reproduces_its_rho(setup):
    from slipstream.planner.service import PlannedHandoff, handoff_record

    _, plan = setup
    rho = {"detect": 60 / (4 * 20), "classify": 60 / (2 * 30)}
    handoff = PlannedHandoff(60.0, plan.envelope.windows_s, plan.envelope.rates_qps,
                             {"detect": 20.0, "classify": 30.0}, rho, {"detect": 1.0, "classify": 1.0},
                             {"detect": 4, "classify": 2})
    record = handoff_record(handoff, "p", epoch=3)
    assert codec.decode_typed("TunerHandoff", codec.encode("TunerHandoff", record)) == record  # the wire form
    got = planfile.from_handoff(record)
    assert {s.stage: got.rho(s) for s in got.stages} == pytest.approx(rho)
    with pytest.raises(ValueError):
        handoff_record(replace(handoff, sample_rates=None), "p", epoch=3)


async def test_a_new_plan_on_the_control_topic_replaces_the_tuners_plan_and_replicas(setup):
    from prometheus_client import CollectorRegistry

    pipe, plan = setup
    act = DryRunActuator()
    clock = Clock()
    svc = TunerService(pipe, plan, TunerConfig(), act, partitions={"detect": 2, "classify": 4},
                       settings=ServiceSettings(reorder_s=0.0), clock=clock,
                       metrics=TunerMetrics(pipe.name, CollectorRegistry()))
    svc.feed(poisson_ns(50, 0, 1, seed=3))
    await svc.tick()  # the old tracker has counted arrivals
    shorter = replace(plan.envelope, windows_s=plan.envelope.windows_s[1:], rates_qps=plan.envelope.rates_qps[1:])
    doubled = replace(plan, envelope=shorter,  # other windows: a new tracker
                      stages=tuple(replace(s, replicas=s.replicas * 2) for s in plan.stages))
    record = {**planfile.to_dict(doubled, pipe.name), "epoch": 7, "at_ns": 0}
    record = codec.decode_typed("TunerHandoff", codec.encode("TunerHandoff", record))  # as read from Kafka
    svc.on_handoff(record)
    svc.on_handoff(replace(record, pipeline="other", epoch=9))  # another pipeline's: ignored
    clock.ns = 1 * NS_PER_S
    await svc.tick()
    assert svc.plan.planned_replicas == {"detect": 4, "classify": 2}
    assert dict(svc.state.replicas) == {"detect": 4, "classify": 2}
    assert act.counts == {"detect": 4, "classify": 2}
    svc.on_handoff(replace(record, stages=tuple(replace(s, replicas=1) for s in record.stages)))  # same epoch
    clock.ns = 2 * NS_PER_S
    await svc.tick()
    assert svc.plan.planned_replicas == {"detect": 4, "classify": 2}


def test_a_huge_epoch_read_never_overflows_the_tuners_config():
    """The stage's latest config with an epoch of 2^63-1 (say from a plan file): the republished one is
    clamped (``slipstream.streams.control_rules.next_epoch``) and encodes, with no OverflowError."""
    from slipstream.streams import codec
    from slipstream.streams.control_rules import EPOCH_MAX
    from slipstream.streams.spec import parse_pipeline
    from slipstream.tuner.service import stage_config_record

    pipe = parse_pipeline({"name": "p", "slo_ms": 300,
                           "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
                           "stages": [{"name": "s", "variants": [{"name": "v", "model": "m", "accuracy": 0.9}],
                                       "defaults": {"variant": "v", "hardware": "cpu-1"}}]})
    latest = replace(stage_config_record(pipe, None, "s", 1, 4, ""), epoch=2**63 - 1)
    rec = stage_config_record(pipe, latest, "s", 2, 4, "scale-up")
    assert rec.epoch == EPOCH_MAX and codec.decode_typed("StageConfig", codec.encode("StageConfig", rec)).replicas == 2


async def test_the_service_as_deployed_acts_on_a_burst_at_the_first_tick_after_it(setup):
    """The live feed's timestamps are in order (offset snapshots): nothing is held back, so a burst
    that came in the last tick is counted by the next decision."""
    pipe, plan = setup
    clock = Clock()
    svc = TunerService(pipe, plan, TunerConfig(activation_s=1.0), DryRunActuator(),
                       partitions={"detect": 2, "classify": 4}, clock=clock)
    svc.feed(poisson_ns(50, 0, 10, seed=2))
    clock.ns = 10 * NS_PER_S
    assert not (await svc.tick()).changes
    svc.feed(np.round(np.linspace(10.0, 10.05, 40) * NS_PER_S).astype(np.int64))  # 40 requests in 50 ms
    clock.ns = int(10.05 * NS_PER_S)
    decision = await svc.tick()
    assert {c.stage for c in decision.changes} == {"detect", "classify"}
    assert all(c.reason == "scale-up" for c in decision.changes)


async def test_results_slower_than_the_plan_assumed_scale_up_a_rate_it_serves(setup):
    """A stage with a capacity and its service times in the hand-off: 40 req/s against 50 it serves
    holds; the same rate, with results (Avro-decoded) whose batches took 1.5x the assumed time, scales
    up, and the pace shows on /metrics."""
    from prometheus_client import CollectorRegistry

    from slipstream.tuner.envelope import EnvelopeSnapshot
    from slipstream.tuner.policy import StageSizing, TunerPlan

    pipe, _ = setup
    ws = (0.1, 0.2, 0.4, 0.8, 1.6)
    stages = tuple(StageSizing(s, 1, 50.0, 1.0, 50.0, tuple(50.0 for _ in ws), v, (10.0, 18.0))
                   for s, v in (("detect", "v"), ("classify", "w")))
    plan = TunerPlan(EnvelopeSnapshot(ws, tuple(5.0 for _ in ws)), 5.0, stages)
    clock, reg = Clock(), CollectorRegistry()

    def run(with_results: bool):
        metrics = TunerMetrics(pipe.name, reg if with_results else CollectorRegistry())
        svc = TunerService(pipe, plan, TunerConfig(activation_s=1.0), DryRunActuator(), partitions={},
                           metrics=metrics, clock=clock)
        svc.feed(np.arange(0, 2 * NS_PER_S, NS_PER_S // 40, dtype=np.int64))  # 40 req/s
        for i in range(20 if with_results else 0):
            hop = {"stage": "classify", "variant": "w", "batch_size": 2, "enqueued_ns": 0, "started_ns": i * 10**8,
                   "finished_ns": i * 10**8 + 27_000_000, "worker": "h-1/0", "received_ns": 0, "model_digest": ""}
            rec = {"request_id": f"r{i}", "pipeline": "shop", "status": "done", "reason": "", "created_ns": 0,
                   "deadline_ns": 0, "finished_ns": 0, "content_type": "x", "output": b"", "hops": [hop],
                   "accuracy": 0.8, "parts": 1, "fragment": "1", "path": []}
            svc.on_result(codec.decode("InferenceResult", codec.encode("InferenceResult", rec)))
        clock.ns = 2 * NS_PER_S
        return svc

    assert not (await run(False).tick()).changes
    decision = await run(True).tick()
    assert decision.targets == {"detect": 1, "classify": 2}
    assert reg.get_sample_value("slipstream_tuner_pace", {"pipeline": "shop", "stage": "classify"}) == pytest.approx(1.5)


async def test_a_burst_beyond_max_replicas_is_said_in_a_log_line_and_a_gauge(setup, caplog):
    pipe, plan = setup
    clock = Clock()
    from prometheus_client import CollectorRegistry
    reg = CollectorRegistry()
    svc = TunerService(pipe, plan, TunerConfig(activation_s=1.0, max_replicas=2), DryRunActuator(),
                       partitions={"detect": 2, "classify": 4}, metrics=TunerMetrics(pipe.name, reg),
                       settings=ServiceSettings(reorder_s=0.0), clock=clock)
    short = lambda: reg.get_sample_value("slipstream_tuner_replicas_short", {"pipeline": "shop", "stage": "detect"})
    svc.feed(poisson_ns(50, 0, 10, seed=2))
    clock.ns = 10 * NS_PER_S
    await svc.tick()
    assert short() == 0 and "capacity short" not in caplog.text
    svc.feed(poisson_ns(150, 10, 3, seed=3))  # three times the planned rate: detect asks 5+, 2 may run
    clock.ns = 13 * NS_PER_S
    with caplog.at_level("INFO", logger="slipstream.tuner.service"):
        decision = await svc.tick()
    assert decision.targets["detect"] == 2 and decision.short["detect"] >= 5
    assert short() == decision.short["detect"] - 2
    assert "shop detect: the live envelope asks" in caplog.text and "capacity short" in caplog.text
    with caplog.at_level("INFO", logger="slipstream.tuner.service"):
        svc.feed(poisson_ns(150, 13, 1, seed=4))
        clock.ns = 14 * NS_PER_S
        await svc.tick()  # still short: the same episode, no second warning
        assert caplog.text.count("detect: the live envelope asks") == 1
        svc.feed(poisson_ns(20, 14, 20, seed=5))
        clock.ns = 34 * NS_PER_S
        await svc.tick()  # below the planned rate for longer than the quiet period
    assert short() == 0 and "detect: capacity no longer short" in caplog.text


def test_the_cost_gauge_reads_the_typed_stage_configs_of_its_pipeline():
    """KafkaArrivals hands the tuner typed StageConfigs: the cost gauge follows its own pipeline's."""
    from prometheus_client import CollectorRegistry

    from tests.control_records import stage_config

    reg = CollectorRegistry()
    metrics = TunerMetrics("p", reg)
    metrics.observe_config(stage_config(pipeline="p", stage="s", cost_per_hour=0.25))
    metrics.observe_config(stage_config(pipeline="other", stage="s", cost_per_hour=9.0))
    assert reg.get_sample_value("slipstream_tuner_cost_dollars_per_hour", {"pipeline": "p", "stage": "s"}) == 0.25
