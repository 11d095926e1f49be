"""The worker's side of the bulk intake (``slipstream.agents.intake``): one call per fetch, decoded into the
window planner's queue and the ack tracker at once, and a bound on what it holds (back-pressure)."""
from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

from slipstream.agents import worker as w
from slipstream.agents.stage import intake
from slipstream.loadgen.bench.dataplane import noop_pipeline
from slipstream.agents.metrics import StageMetrics
from slipstream.agents.zoo import load_executor
from slipstream.streams import codec, kafka as kclient
from slipstream.streams.client import make_request
from slipstream.streams.config import KafkaSettings
from slipstream.streams.spec import load_pipeline

TP = ("in", 0)


def stage_worker(tmp_path: Path) -> w.StageWorker:
    pipe = load_pipeline(noop_pipeline(f"intake-{uuid.uuid4().hex[:6]}", 1, tmp_path))
    return w.StageWorker(pipe, "s0", KafkaSettings(), load_executor, StageMetrics.create(pipe.name, "s0"))


def fetch(pipe, first: int, n: int) -> list:
    """``n`` records as a client writes them (key, headers, value)."""
    reqs = [make_request(pipe, b"x") for _ in range(n)]
    return [SimpleNamespace(topic=TP[0], partition=TP[1], offset=first + i, key=r.request_id.encode(),
                            headers=kclient.headers_for("InferenceRequest", r),
                            value=codec.encode("InferenceRequest", r))
            for i, r in enumerate(reqs)]


def test_a_fetch_is_decoded_onto_the_queue_and_tracked_for_acks_in_one_go(tmp_path):
    sw = stage_worker(tmp_path)
    recs = fetch(sw.pipe, 10, 3)
    sw.on_records(TP, recs)
    assert len(sw.windows) == 0 and sw.windows._wake.is_set()  # nothing decoded until the batch loop looks
    sw.windows._admit()
    queue = sw.windows.planner.queue
    assert [(it.offset, it.record) for it in queue] == [(10, recs[0]), (11, recs[1]), (12, recs[2])]
    assert len({it.arrival_ns for it in queue}) == 1  # one receipt time per fetch
    assert sw.commits.acks.unfinished() == 3 and sw.committable(TP) is None  # nothing done yet
    sw.commits.acks.done_many([(TP, 10), (TP, 11)])
    assert sw.committable(TP) == 12  # what faust commits: one past the done prefix


def test_the_consumer_waits_while_the_worker_holds_max_queued_records(tmp_path, monkeypatch):
    monkeypatch.setattr(intake, "MAX_QUEUED", 5)
    sw = stage_worker(tmp_path)
    sw.on_records(TP, fetch(sw.pipe, 0, 3))
    assert sw.room.is_set()
    sw.on_records(TP, fetch(sw.pipe, 3, 2))
    assert not sw.room.is_set()  # intake 5: the next fetch waits
    sw.windows._admit()
    sw.intake.update_room()
    assert not sw.room.is_set()  # still held, now queued
    for _ in range(2):
        sw.windows.planner.queue.popleft()  # taken into a window
    sw.intake.update_room()
    assert sw.room.is_set()


def test_the_consumer_waits_while_the_queue_holds_more_than_the_slo_serves(tmp_path):
    sw = stage_worker(tmp_path)  # SLO 60 s, one replica
    sw.pool.pace_ns = 1_000_000_000  # a queued item takes 1 s
    sw.on_records(TP, fetch(sw.pipe, 0, 61))
    sw.windows._admit()
    sw.intake.update_room()
    assert not sw.room.is_set()  # 61 s of work held: the rest waits in Kafka, undecoded
    sw.windows.planner.queue.popleft()
    sw.intake.update_room()
    assert sw.room.is_set()


def test_the_room_is_the_count_bound_and_whatever_else_blocks():
    assert intake.has_room(10, 20, False)
    assert not intake.has_room(intake.MAX_QUEUED - 5, 5, False)  # held and queued count together
    assert not intake.has_room(0, 0, True)
