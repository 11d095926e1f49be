"""The window planner without a broker, an event loop or a real clock: every decision takes now_ns."""
from pathlib import Path

import pytest
import yaml

from slipstream.agents import window as w
from slipstream.agents.window import Item, Take, Wait, WindowPlanner
from slipstream.streams import batching, topics
from slipstream.streams.executor import Emit, ItemOutput
from slipstream.streams.spec import load_pipeline
from tests.control_records import request, stage_config

MS = 1_000_000


def item(i: int, arrival_ms: float = 0, deadline_ms: float = 1e6, tp: str = "p0", floor=None) -> Item:
    req = request(request_id=f"r{i}", pipeline="p", created_ns=0, deadline_ns=int(deadline_ms * MS),
                  accuracy_floor=floor, payload=b"x")
    return Item(record=None, req=req, arrival_ns=int(arrival_ms * MS), tp=tp, offset=i)


@pytest.fixture
def pipe(tmp_path: Path):
    doc = {"name": "p", "slo_ms": 1000,
           "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
           "stages": [{"name": s, "variants": [{"name": "noop", "model": "noop", "accuracy": 0.9}],
                       "defaults": {"max_batch": 4, "batch_timeout_ms": 5}} for s in ("a", "b")],
           "edges": [{"from": "a", "to": "b"}]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    return load_pipeline(tmp_path / "p.yaml")


S = batching.BatchSettings.from_ms(4, 5)


def test_waits_for_the_oldest_items_timeout_then_takes_what_is_queued():
    p = WindowPlanner()
    p.add([item(0, arrival_ms=10), item(1, arrival_ms=12)])
    assert p.poll(11 * MS, S, True) == Wait(15 * MS)  # timer from the oldest arrival, not the last flush
    took = p.poll(15 * MS, S, True)
    assert isinstance(took, Take) and [it.offset for it in took.items] == [0, 1] and len(p) == 0


def test_a_full_window_goes_at_once_and_only_max_batch_of_it():
    p = WindowPlanner()
    p.add(item(i) for i in range(6))
    took = p.poll(0, S, True)
    assert [it.offset for it in took.items] == [0, 1, 2, 3] and len(p) == 2


def test_no_free_replica_or_no_items_means_wait_for_a_change():
    p = WindowPlanner()
    assert p.poll(0, S, True) == Wait(None)
    p.add([item(0)])
    assert p.poll(10**12, S, False) == Wait(None)


@pytest.mark.parametrize("queued,age_ms", [(1, 0), (1, 5), (3, 4.9), (4, 0), (5, 100)])
def test_the_decision_is_streams_batching_the_estimators_code(queued, age_ms):
    p = WindowPlanner()
    p.add(item(i) for i in range(queued))
    now = int(age_ms * MS)
    took = isinstance(p.poll(now, S, True), Take)
    assert took == batching.ready(queued, 0, now, S)


def test_revoked_partitions_leave_the_queue():
    p = WindowPlanner()
    p.add([item(0, tp="a"), item(1, tp="b"), item(2, tp="a")])
    assert p.forget({"a"}) == 2 and [it.offset for it in p.queue] == [1]


def test_accuracy_floor_above_every_variant_is_a_drop_with_a_reason(pipe):
    cfg = stage_config(variant="noop", max_batch=4, batch_timeout_ms=5.0)
    groups, dropped = w.split_variants([item(0), item(1, floor=0.95)], cfg, {"noop": 0.9})
    assert [it.offset for it in groups["noop"]] == [0]
    assert [it.offset for it, _ in dropped] == [1] and "accuracy floor" in dropped[0][1]


def test_sub_batch_drops_the_doomed_runs_a_prefix_and_defers_the_rest():
    predict = lambda b: b * 2 * MS  # noqa: E731 - 2 ms per item
    pending = [item(0, deadline_ms=1), item(1, deadline_ms=100), item(2, deadline_ms=5),
               item(3, deadline_ms=100)]
    step = w.sub_batch(pending, 0, predict, S)
    assert [it.offset for it, _ in step.dropped] == [0]
    assert step.dropped[0][1] == batching.drop_reason(1 * MS, 0, 2 * MS)
    # live: 1, 2, 3; the prefix [1, 2] finishes at 4 ms <= 5 ms; [1, 2, 3] at 6 ms > 5 ms
    assert [it.offset for it in step.run] == [1, 2] and [it.offset for it in step.deferred] == [3]


def test_batch_outputs_route_on_or_end_as_errors_with_the_hop(pipe):
    batch = [item(0), item(1)]
    ok = w.batch_outputs(pipe, "a", "noop", 0.9, batch, [ItemOutput((Emit(b"y", "t"),))] * 2, None,
                         1 * MS, 2 * MS, "w/0", "0123456789ab")
    assert [[o.topic for o in outs] for outs in ok] == [[topics.stage_input("p", "b")]] * 2
    assert ok[0][0].value.hops[-1].to_dict() == {"stage": "a", "variant": "noop", "batch_size": 2, "enqueued_ns": 0,
                                          "started_ns": 1 * MS, "finished_ns": 2 * MS, "worker": "w/0",
                                          "received_ns": 0, "model_digest": "0123456789ab"}
    failed = w.batch_outputs(pipe, "a", "noop", 0.9, batch, None, "model error", 1 * MS, 2 * MS, "w/0",
                             "0123456789ab")
    assert [outs[0].value.status for outs in failed] == ["error", "error"]
    assert failed[0][0].value.hops[-1].model_digest == "0123456789ab"
    assert failed[1][0].value.reason == "model error" and failed[1][0].value.hops[-1].stage == "a"
    bad = w.batch_outputs(pipe, "a", "noop", 0.9, batch[:1], [ItemOutput((Emit(b"y", "t", to="zz"),))],
                          None, 1 * MS, 2 * MS, "w/0")
    assert bad[0][0].value.status == "error" and "zz" in bad[0][0].value.reason


@pytest.mark.parametrize("routing", [{}, {"b": 1.0}, {"a": 0.0, "b": 2.0}, {"a": 1.0, "b": 1.0}])
def test_split_variants_common_case_equals_the_per_item_rule(routing):
    """One variant in service and no floors is split without a choice per item: what the rule
    (``slipstream.agents.control.choose_variant``) would choose item by item, the primary or not."""
    from slipstream.agents.control import choose_variant
    cfg = stage_config(variant="a", max_batch=8, routing=routing)
    acc = {"a": 0.7, "b": 0.8}
    window = [item(i) for i in range(40)]
    groups, dropped = w.split_variants(window, cfg, acc)
    expect: dict = {}
    for it in window:
        expect.setdefault(choose_variant(it.req.request_id, None, cfg, acc)[0], []).append(it.offset)
    assert {v: [it.offset for it in its] for v, its in groups.items()} == expect and dropped == []
