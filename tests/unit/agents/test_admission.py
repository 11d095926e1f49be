"""A stage worker's door and its windows: requests that break the contract are answered before any
window (``slipstream.agents.admission``), and a window that fails answers every item (``Server.serve_window``)."""
from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from slipstream.agents import routing, worker as w
from slipstream.agents.admission import admit
from slipstream.streams.shedding import SourceGate
from slipstream.loadgen.bench.dataplane import noop_pipeline
from slipstream.agents.replicas import Fleet
from slipstream.agents.metrics import StageMetrics
from slipstream.agents.window import Item
from slipstream.agents.zoo import load_executor
from slipstream.schemas.records import InferenceRequest
from slipstream.streams import batching, codec, contract, kafka as kclient, topics
from slipstream.streams.client import make_request
from slipstream.streams.config import KafkaSettings
from slipstream.streams.spec import load_pipeline
from tests.control_records import handoff as typed_handoff, stage_config

TP = ("in", 0)


def pipeline(tmp_path: Path, stages: int = 2):
    return load_pipeline(noop_pipeline(f"adm-{uuid.uuid4().hex[:6]}", stages, tmp_path))


def rec(offset: int, value: bytes | None, key: bytes | None = None, headers=()) -> SimpleNamespace:
    return SimpleNamespace(topic=TP[0], partition=TP[1], offset=offset, value=value, key=key, headers=headers)


def test_each_record_is_admitted_refused_with_an_error_result_or_dead_lettered(tmp_path):
    pipe = pipeline(tmp_path)
    good = make_request(pipe, b"x")
    bad_frag = replace(make_request(pipe, b"x"), fragment="abc")
    no_id = replace(make_request(pipe, b"x"), request_id="")
    other = replace(make_request(pipe, b"x"), pipeline="someone-else")
    records = [rec(i, codec.encode("InferenceRequest", r)) for i, r in enumerate((good, bad_frag, no_id, other))]
    records.append(rec(4, b"junk"))
    got = admit(pipe, [(TP, records, 7)], contract.Bounds.of(pipe, "s0", 1 << 20), time.time_ns())
    assert [(it.offset, it.req.request_id, it.arrival_ns) for it in got.items] == [(0, good.request_id, 7)]
    ((item, out),) = got.refused
    assert item.offset == 1 and out.topic == topics.results(pipe.name) and out.key == bad_frag.request_id
    assert out.value.status == "error" and "fragment='abc'" in out.value.reason
    codec.encode("InferenceResult", out.value)  # it can be written
    assert [(r.offset, why.split(":")[0]) for _, r, why in got.dead][:2] == [(2, "contract"), (3, "contract")]
    assert "request_id=''" in got.dead[0][2] and "pipeline='someone-else'" in got.dead[1][2]
    assert got.dead[2][1].offset == 4 and "single-object header" in got.dead[2][2]


async def test_a_window_that_fails_serves_its_items_alone_and_fails_only_the_poisoned_one(tmp_path):
    pipe = pipeline(tmp_path)
    sw = w.StageWorker(pipe, "s0", KafkaSettings(), load_executor, StageMetrics.create(pipe.name, "s0"))
    sw.pool.put_in_force(await sw.pool.prepare(sw.switch.config, Fleet()))
    now = time.time_ns()
    reqs = [make_request(pipe, f"p{i}".encode()) for i in range(4)]
    reqs[2] = replace(reqs[2], deadline_ns=None)  # past the door by a bug: the window's decisions raise on it
    window = [Item(rec(i, b""), r, now, TP, i) for i, r in enumerate(reqs)]
    replica = sw.pool.idle()
    answers = await sw.server.serve_window(replica, sw.switch.config, sw.pool.fleet.variants, window,
                                     batching.BatchSettings.from_ms(4, 0))
    by_offset = {it.offset: outs for outs, it in answers}
    assert sorted(by_offset) == [0, 1, 2, 3]  # every item answered once
    for i in (0, 1, 3):
        (out,) = by_offset[i]
        assert out.topic == topics.stage_input(pipe.name, "s1") and out.value.payload == f"p{i}".encode()
    (poisoned,) = by_offset[2]
    assert poisoned.value.status == "error" and "internal error" in poisoned.value.reason
    assert "TypeError" in poisoned.value.reason


def written(pipe, offset: int, req: InferenceRequest, value: bytes | None = None) -> SimpleNamespace:
    """A record as every producer of the project writes ``req``: keyed by its id, with its headers."""
    return rec(offset, codec.encode("InferenceRequest", req) if value is None else value,
               req.request_id.encode(), kclient.headers_for("InferenceRequest", req))


def test_an_expired_request_is_dropped_from_its_headers_and_its_record_never_decoded(tmp_path, monkeypatch):
    pipe = pipeline(tmp_path)
    now = time.time_ns()
    stale = make_request(pipe, b"x", created_ns=now - int(2 * pipe.slo_ms * 1_000_000))
    fresh = make_request(pipe, b"y")
    decoded = []
    real = codec.codec("InferenceRequest").decode
    monkeypatch.setattr(codec.codec("InferenceRequest"), "decode", lambda data: decoded.append(data) or real(data))
    gate = SourceGate("s0")
    records = [written(pipe, 0, stale, value=b"not even a record"), written(pipe, 1, fresh)]
    got = admit(pipe, [(TP, records, 7)], contract.Bounds.of(pipe, "s0", 1 << 20), now,
                lambda deadline: gate.judge(deadline, now, 0))
    ((item, why),) = got.dropped
    assert item.offset == 0 and why.startswith("deadline: expired before s0") and not got.dead
    assert decoded == [records[1].value]  # only the fresh one was decoded
    answer = routing.ended(pipe, item.req, "dropped", why, now)
    assert (answer.topic, answer.key) == (topics.results(pipe.name), stale.request_id)
    assert {k: getattr(answer.value, k) for k in ("request_id", "created_ns", "deadline_ns", "fragment")} == \
        {"request_id": stale.request_id, "created_ns": stale.created_ns,
         "deadline_ns": stale.deadline_ns, "fragment": "1"}
    codec.encode("InferenceResult", answer.value)
    assert [it.offset for it in got.items] == [1]


def test_a_record_without_the_header_or_a_usable_key_is_judged_after_decoding(tmp_path):
    pipe = pipeline(tmp_path)
    now = time.time_ns()
    stale = make_request(pipe, b"x", created_ns=now - int(2 * pipe.slo_ms * 1_000_000))
    bare = rec(0, codec.encode("InferenceRequest", stale))  # another producer: no key, no headers
    junk = written(pipe, 1, replace(stale, request_id="k"), value=b"junk")
    junk.key = b"\xff\xfe"  # not UTF-8: cannot stand for an id, so the record is decoded
    gate = SourceGate("s0")
    got = admit(pipe, [(TP, [bare, junk], 7)], contract.Bounds.of(pipe, "s0", 1 << 20), now,
                lambda deadline: gate.judge(deadline, now, 0))
    ((item, why),) = got.dropped
    assert item.offset == 0 and item.req.payload == b"x" and why.startswith("deadline")
    assert [r.offset for _, r, _ in got.dead] == [1]


def test_the_source_worker_sheds_what_the_bottleneck_cannot_serve_before_decoding(tmp_path, monkeypatch):
    pipe = pipeline(tmp_path)
    sw = w.StageWorker(pipe, "s0", KafkaSettings(), load_executor, StageMetrics.create(pipe.name, "s0"))
    answered = []

    async def finish(window, answers):
        answered.extend(outs[0].value for outs, _ in answers)
    monkeypatch.setattr(sw.commits, "finish", finish)
    handoff = typed_handoff(pipeline=pipe.name, epoch=3, stages=[
        {"stage": "s0", "replicas": 1, "mu_qps": 1000.0, "visit_ratio": 1.0},
        {"stage": "s1", "replicas": 2, "mu_qps": 10.0, "visit_ratio": 1.0}])  # the bottleneck: 20 req/s
    sw.on_plan("TunerHandoff", handoff)
    sw.on_plan("StageConfig", stage_config(pipeline=pipe.name, stage="s1", epoch=4, replicas=1))  # scaled in: 10
    assert sw.intake.gate.rate_qps == pytest.approx(10.0)
    decoded = []
    real = codec.codec("InferenceRequest").decode
    monkeypatch.setattr(codec.codec("InferenceRequest"), "decode", lambda data: decoded.append(data) or real(data))
    burst = [written(pipe, i, make_request(pipe, b"p", slo_ms=400)) for i in range(40)]  # 4 s of the bottleneck
    sw.on_records(TP, burst)

    async def read():
        sw.windows._admit()
        await sw.windows.drain()
    asyncio.run(read())
    n = 0.4 * 10  # what drains at 10 req/s within the 400 ms
    assert n - 1 <= len(sw.windows) <= n + 1 and len(decoded) == len(sw.windows)
    assert len(answered) == 40 - len(sw.windows)
    assert all(a.status == "dropped" and a.reason.startswith("shed: ") for a in answered)
