"""A stage worker's door and its windows: requests that break the contract are answered before any
window (``agents.admission``), and a window that fails answers every item (``StageWorker.answer``)."""
from __future__ import annotations

import time
import uuid
from pathlib import Path
from types import SimpleNamespace

from agents import worker as w
from agents.admission import admit
from loadgen.bench.dataplane import noop_pipeline
from agents.instances import Fleet
from agents.metrics import StageMetrics
from agents.window import Item
from agents.zoo import load_executor
from streams import batching, codec, contract, topics
from streams.client import make_request
from streams.config import KafkaSettings
from streams.spec import load_pipeline

TP = ("in", 0)


def pipeline(tmp_path: Path, stages: int = 2):
    return load_pipeline(noop_pipeline(f"adm-{uuid.uuid4().hex[:6]}", stages, tmp_path))


def rec(offset: int, value: bytes | None) -> SimpleNamespace:
    return SimpleNamespace(topic=TP[0], partition=TP[1], offset=offset, value=value)


def test_each_record_is_admitted_refused_with_an_error_result_or_dead_lettered(tmp_path):
    pipe = pipeline(tmp_path)
    good = make_request(pipe, b"x")
    bad_frag = dict(make_request(pipe, b"x"), fragment="abc")
    no_id = dict(make_request(pipe, b"x"), request_id="")
    other = dict(make_request(pipe, b"x"), pipeline="someone-else")
    records = [rec(i, codec.encode("InferenceRequest", r)) for i, r in enumerate((good, bad_frag, no_id, other))]
    records.append(rec(4, b"junk"))
    got = admit(pipe, [(TP, records, 7)], contract.Bounds.of(pipe, "s0", 1 << 20), time.time_ns())
    assert [(it.offset, it.req["request_id"], it.arrival_ns) for it in got.items] == [(0, good["request_id"], 7)]
    ((item, out),) = got.refused
    assert item.offset == 1 and out.topic == topics.results(pipe.name) and out.key == bad_frag["request_id"]
    assert out.value["status"] == "error" and "fragment='abc'" in out.value["reason"]
    codec.encode("InferenceResult", out.value)  # it can be written
    assert [(r.offset, why.split(":")[0]) for _, r, why in got.dead][:2] == [(2, "contract"), (3, "contract")]
    assert "request_id=''" in got.dead[0][2] and "pipeline='someone-else'" in got.dead[1][2]
    assert got.dead[2][1].offset == 4 and "single-object header" in got.dead[2][2]


async def test_a_window_that_fails_serves_its_items_alone_and_fails_only_the_poisoned_one(tmp_path):
    pipe = pipeline(tmp_path)
    sw = w.StageWorker(pipe, "s0", KafkaSettings(), load_executor, StageMetrics.create(pipe.name, "s0"))
    sw.fleet = await sw._prepare(sw.config, Fleet())
    now = time.time_ns()
    reqs = [make_request(pipe, f"p{i}".encode()) for i in range(4)]
    reqs[2] = dict(reqs[2], deadline_ns=None)  # past the door by a bug: the window's decisions raise on it
    window = [Item(rec(i, b""), r, now, TP, i) for i, r in enumerate(reqs)]
    inst = sw.fleet.idle()
    answers = await sw.answer(inst, window, batching.BatchSettings.from_ms(4, 0))
    by_offset = {it.offset: outs for outs, it in answers}
    assert sorted(by_offset) == [0, 1, 2, 3]  # every item answered once
    for i in (0, 1, 3):
        (out,) = by_offset[i]
        assert out.topic == topics.stage_input(pipe.name, "s1") and out.value["payload"] == f"p{i}".encode()
    (poisoned,) = by_offset[2]
    assert poisoned.value["status"] == "error" and "internal error" in poisoned.value["reason"]
    assert "TypeError" in poisoned.value["reason"]
