"""The stage worker's parts (``slipstream.agents.stage``) alone, each with fakes of what it is given."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from slipstream.agents.control import defaults
from slipstream.agents.metrics import StageMetrics
from slipstream.agents.replicas import Fleet, VariantState
from slipstream.agents.stage.commit import Commits
from slipstream.agents.stage.config_switch import ConfigSwitch
from slipstream.agents.stage.intake import Intake
from slipstream.agents.stage.pool import ReplicaPool
from slipstream.agents.stage.windows import Windows
from slipstream.agents.window import Item
from slipstream.schemas.records import StageConfig
from slipstream.streams.config import KafkaSettings
from slipstream.streams.heartbeat import Heartbeat
from slipstream.streams.spec import parse_pipeline
from tests.control_records import handoff as typed_handoff, request as typed_request, stage_config as typed_config

PIPE = parse_pipeline({
    "name": "pp", "slo_ms": 100, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
    "stages": [{"name": "s", "variants": [{"name": "a", "model": "noop", "accuracy": 0.5}],
                "defaults": {"variant": "a", "hardware": "cpu-1", "max_batch": 4}}]})
TP = ("in", 0)


def metrics() -> StageMetrics:
    return StageMetrics.create("pp", "s")


def item(offset: int) -> Item:
    return Item(SimpleNamespace(offset=offset), typed_request(request_id=f"r{offset}"), 0, TP, offset)


class Predictor:
    def __init__(self, ns_per_item: int) -> None:
        self.ns = ns_per_item

    def predict_ns(self, b: int) -> int:
        return 1_000_000 + self.ns * b


def test_the_pool_is_behind_when_its_queue_outlasts_the_slo_and_not_before_a_window_each():
    pool = ReplicaPool(PIPE, "s", None, metrics(), max_replicas=2)
    cfg = defaults(PIPE, "s")
    pool.fleet = Fleet([SimpleNamespace(), SimpleNamespace()], {"a": VariantState(0.5, Predictor(9_000_000))})
    assert pool.serve_ns(cfg) == 10_000_000  # batch 1: the fastest a request is served
    assert pool.pace_ns == (1_000_000 + 4 * 9_000_000) // 4  # a full batch's time per item
    assert not pool.behind(7, cfg)  # less than a window per replica: never behind
    assert not pool.behind(21, cfg)  # 21 x 9.25 ms on 2 replicas: 97 ms < the 100 ms SLO
    assert pool.behind(22, cfg)
    pool.pace_ns = 10**9  # however slow: a window for each replica is always let in
    assert not pool.behind(7, cfg) and pool.behind(8, cfg)
    pool.loader.shutdown()


def test_intake_answers_drops_apart_from_the_queue_and_reads_every_record_first():
    read = []
    intake = Intake(PIPE, "s", metrics(), lambda tp, recs: read.append((tp, len(recs))), lambda: None,
                    lambda: 0, lambda: False)
    intake.gate.rate_qps = None
    assert not intake.arrived()
    junk = SimpleNamespace(topic="in", partition=0, offset=7, key=None, headers=[], value=b"junk")
    intake.on_records(TP, [junk])
    assert intake.arrived() and list(intake.values()) == [b"junk"]
    got = intake.admit(serve_ns=0)
    assert read == [(TP, 1)] and not intake.arrived()
    assert got.items == [] and got.answered == [] and [r.offset for _, r, _ in got.dead] == [7]


def test_intake_forgets_revoked_fetches_and_its_gate_follows_the_share():
    intake = Intake(PIPE, "s", metrics(), lambda tp, recs: None, lambda: None, lambda: 4090, lambda: False)
    intake.on_records(("in", 0), [SimpleNamespace(value=b"")] * 3)
    intake.on_records(("in", 1), [SimpleNamespace(value=b"")] * 4)
    assert not intake.room.is_set()  # 7 held and 4,090 queued: at the bound
    intake.forget({("in", 1)})
    intake.update_room()
    assert intake.room.is_set() and len(list(intake.values())) == 3
    intake.on_plan("TunerHandoff", typed_handoff(pipeline="pp", epoch=1, stages=[
        {"stage": "s", "replicas": 1, "mu_qps": 100.0, "visit_ratio": 1.0}]))
    full = intake.gate.rate_qps
    intake.set_share(1, 4)
    assert full and intake.gate.rate_qps == pytest.approx(full / 4)


class FakeDelivery:
    def __init__(self, lost: set[int]) -> None:
        self.lost, self.sent = lost, []

    async def send_all(self, pairs):
        self.sent += pairs
        return pairs

    async def settle(self, sent):
        return sorted(self.lost)


async def test_commits_ack_only_the_inputs_whose_outputs_are_in_kafka_and_fail_liveness_for_the_rest():
    calls = []
    hb = Heartbeat()
    commits = Commits(PIPE, "s", KafkaSettings(), metrics(), hb, lambda: calls.append("room"),
                      lambda: calls.append("wake"))
    commits.delivery = FakeDelivery(lost={1})  # the second output: neither delivered nor replaced
    window = [item(0), item(1), item(2)]
    commits.read(TP, [it.record for it in window])
    out = SimpleNamespace(topic="elsewhere", record="InferenceRequest", value={})
    await commits.finish(window, [([out], it) for it in window])
    assert commits.committable(TP) == 1  # offset 1 not acked: the prefix stops before it
    assert hb.problem() is not None and "left unacked" in hb.problem()
    assert calls == ["room", "room", "wake"] and commits.backlog.windows == 0


class FakePool:
    def __init__(self) -> None:
        self.fleet, self.in_force, self.retired = Fleet(), [], []

    async def prepare(self, cfg, current):
        return Fleet([SimpleNamespace(cfg=cfg)], {}, cfg.hardware)

    def put_in_force(self, fleet):
        self.in_force.append(fleet)
        self.fleet = fleet

    def retire_unused(self, old, *kept):
        self.retired.append(old)

    def keep_spares(self, cfg, waiting):
        pass

    def drop_hung(self, replica, why):
        pass


def stage_config(epoch: int, batch: int = 4) -> StageConfig:
    return typed_config(pipeline="pp", stage="s", variant="a", hardware="cpu-1", max_batch=batch,
                        batch_timeout_ms=5.0, replicas=1, partitions=1, epoch=epoch, planner_mode="t")


async def test_a_config_goes_in_force_at_the_boundary_and_a_replacement_yields_to_a_newer_config():
    pool, woken = FakePool(), []
    switch = ConfigSwitch(PIPE, "s", pool, metrics(), lambda: woken.append(1))
    await switch.start([stage_config(1), stage_config(2, batch=8)])
    assert switch.config.epoch == 2 and len(pool.in_force) == 1  # only the newest is loaded
    assert not await switch.offer(stage_config(2))  # stale
    assert await switch.offer(stage_config(3, batch=2)) and woken
    assert switch.config.epoch == 2  # not before the boundary
    assert switch.at_boundary().max_batch == 2 and switch.pending is None and len(pool.in_force) == 2
    switch.replace_hung(pool.fleet.replicas[0], "hung")
    assert await switch.offer(stage_config(4))  # a newer config comes while the replacement loads
    await asyncio.sleep(0)
    assert switch.pending[0].epoch == 4 and pool.retired[-1].replicas[0].cfg.epoch == 3


async def test_a_window_frees_its_replica_before_its_outputs_are_delivered():
    order = []
    replica = SimpleNamespace(release=lambda: order.append("released"))

    async def serve_window(r, cfg, variants, window, s):
        order.append("served")
        return [([], it) for it in window]

    async def finish(window, answers):
        order.append("delivered")

    server, commits = SimpleNamespace(serve_window=serve_window), SimpleNamespace(finish=finish)
    windows = Windows(None, None, None, server, commits, metrics(), asyncio.Event())
    windows.track(windows._window(replica, None, {}, [item(0)], None))
    await windows.drain()
    assert order == ["served", "released", "delivered"] and not windows._inflight
