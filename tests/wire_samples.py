"""One sample value of every record type in ``schemas/``, every field set (none left to a default), so
a wire test that round-trips them exercises every field, the nested ``HopTiming`` and the enum."""
from __future__ import annotations

HOP = {"stage": "classify", "variant": "lite0", "batch_size": 4, "enqueued_ns": 1_700_000_000_000_000_000,
       "started_ns": 1_700_000_000_001_000_000, "finished_ns": 1_700_000_000_007_500_000,
       "worker": "host-1/1234", "received_ns": 1_700_000_000_000_600_000,
       "model_digest": "3f2a9c0d1b7e"}

SAMPLES: dict[str, dict] = {
    "HopTiming": HOP,
    "InferenceRequest": {
        "request_id": "r-1", "pipeline": "image-classify", "created_ns": 1_700_000_000_000_000_000,
        "deadline_ns": 1_700_000_000_400_000_000, "accuracy_floor": 0.75, "content_type": "image/jpeg",
        "payload": b"\xff\xd8\xff\x00jpeg", "hops": [HOP], "fragment": "1/2", "path": ["detect:0/2"],
        "accuracy": 0.751},
    "InferenceResult": {
        "request_id": "r-1", "pipeline": "image-classify", "status": "dropped",
        "reason": "deadline: predicted finish 12.3 ms after the deadline",
        "created_ns": 1_700_000_000_000_000_000, "deadline_ns": 1_700_000_000_400_000_000,
        "finished_ns": 1_700_000_000_007_500_000, "content_type": "application/json",
        "output": b'{"top5": [[1, 0.5]]}', "hops": [HOP, {**HOP, "stage": "join"}], "accuracy": 0.751,
        "parts": 2, "fragment": "1", "path": ["detect:1/2"]},
    "StageConfig": {
        "pipeline": "image-classify", "stage": "classify", "variant": "lite0", "hardware": "cpu-1",
        "max_batch": 4, "batch_timeout_ms": 10.0, "replicas": 2, "partitions": 4, "epoch": 7,
        "planner_mode": "milp", "predicted_p99_ms": 44.3, "routing": {"lite0": 0.7, "lite1": 0.3},
        "cost_per_hour": 0.1, "reason": "plan", "digests": {"lite0": "3f2a9c0d1b7e"}},
    "DeadLetter": {"original": b"\x00garbage", "topic": "slipstream.p.s.in", "partition": 3,
                   "offset": 42, "error": "not a Slipstream InferenceRequest", "stage": "s",
                   "at_ns": 1_700_000_000_000_000_000},
    "ScalingAction": {
        "pipeline": "image-classify", "stage": "classify", "replicas": 2, "previous_replicas": 1,
        "partitions": 4, "reason": "scale-up", "window_s": 0.1, "live_rate_qps": 124.2,
        "planned_rate_qps": 86.0, "at_ns": 1_700_000_000_000_000_000, "cost_per_hour": 0.2},
    "TunerHandoff": {
        "pipeline": "image-classify", "epoch": 7, "mean_rate_qps": 18.0, "windows_s": [0.1, 1.0],
        "rates_qps": [80.0, 30.0],
        "stages": [{"stage": "classify", "replicas": 1, "mu_qps": 86.0, "visit_ratio": 1.0}],
        "at_ns": 1_700_000_000_000_000_000,
        "capacity": [{"stage": "classify", "budget_ms": 380.0, "rate_qps": 86.0, "window_qps": [400.0, 120.0],
                      "variant": "lite0", "service_ms": [11.6, 21.0],
                      "ladder": [{"variant": "lite0", "accuracy": 0.751, "share": 1.0, "rate_qps": 86.0,
                                  "window_qps": [400.0, 120.0], "service_ms": [11.6, 21.0],
                                  "cpu_ms_per_item": 10.5}],
                      "cpu_ms_per_item": 10.5}],
        "host": {"free_cores": 1.35, "request_cpu_ms": 3.5, "window_cpu_ms": 1.5}},
}
