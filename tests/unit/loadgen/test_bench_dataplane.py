"""The data-plane benchmark times each hop from per-hop timestamps (no division of the total)."""
from dataclasses import dataclass

from slipstream.loadgen.bench.dataplane import format_report, relay_hop_ends, split_hops, stage_hop_ends
from slipstream.loadgen.bench.relay import RELAY_HEADER
from slipstream.streams import codec
from slipstream.streams.client import request_record

MS = 1_000_000


@dataclass
class Record:  # the two fields of an aiokafka ConsumerRecord the benchmark reads
    value: bytes
    headers: tuple = ()


def hop(stage: str, enqueued: int, finished: int) -> dict:
    return {"stage": stage, "variant": "noop", "batch_size": 1, "enqueued_ns": enqueued,
            "started_ns": enqueued, "finished_ns": finished, "worker": "w"}


def test_stage_hops_come_from_the_results_hop_timings():
    res = {"request_id": "r", "pipeline": "p", "status": "done", "reason": "", "created_ns": 0,
           "deadline_ns": 10**12, "finished_ns": 30 * MS, "content_type": "x", "output": b"",
           "hops": [hop("s0", 0, 5 * MS), hop("s1", 5 * MS, 12 * MS), hop("s2", 12 * MS, 30 * MS)],
           "accuracy": 1.0, "parts": 1, "fragment": "1", "path": []}
    rid, created, ends = stage_hop_ends(Record(codec.encode("InferenceResult", res)))
    assert (rid, created, ends) == ("r", 0, [5 * MS, 12 * MS, 30 * MS])
    hops, delivery, e2e = split_hops(created, ends, 34 * MS)
    assert hops == [5 * MS, 7 * MS, 18 * MS] and delivery == 4 * MS and e2e == 34 * MS
    assert sum(hops) + delivery == e2e  # 3 hops + the 4th transit, nothing divided


def test_relay_hops_come_from_the_relays_produce_stamps():
    req = request_record("p", "r", 100, 1000, "x", b"")
    headers = (("slipstream-schema", b"InferenceRequest"), (RELAY_HEADER, b"110"), (RELAY_HEADER, b"125"))
    rid, created, ends = relay_hop_ends(Record(codec.encode("InferenceRequest", req), headers))
    assert (rid, created, ends) == ("r", 100, [110, 125])
    assert split_hops(created, ends, 140) == ([10, 15], 15, 40)


def test_report_names_per_hop_delivery_and_end_to_end_with_ratios():
    lat = {f"{who}_{q}_ms_{k}": v for who, v in (("stage", 2.0), ("relay", 1.0))
           for q in ("p50", "p99") for k in ("hop", "delivery", "e2e")}
    text = format_report({"latency": lat, "throughput": {"stage_msgs_per_s": 10.0, "relay_msgs_per_s": 40.0}})
    assert "latency per hop, p99 (ms)                     2.00            1.00    2.00" in text
    assert "last transit to client, p50" in text and "end to end, 3 hops, p99" in text
    assert text.splitlines()[-1].endswith("0.25")


def test_report_sets_exactly_once_beside_at_least_once_of_the_same_run():
    lat = {f"{who}_{q}_ms_{k}": v for who, v in (("stage", 2.0), ("eos", 3.0), ("relay", 1.0))
           for q in ("p50", "p99") for k in ("hop", "delivery", "e2e")}
    tp = {"stage_msgs_per_s": 10.0, "eos_msgs_per_s": 8.0, "relay_msgs_per_s": 40.0}
    runs = {**{k: [v, v] for k, v in lat.items()}, **{k: [v] for k, v in tp.items()}}
    text = format_report({"latency": lat, "throughput": tp, "runs": runs})
    assert "latency per hop, p99 (ms)                       2.00          3.00    1.50" in text
    assert "one stage worker, msgs/s (batch 64)            10.00          8.00    0.80" in text
    assert "  p99_ms_hop                  2.00      2.00 |      3.00      3.00 |      1.00      1.00" in text
