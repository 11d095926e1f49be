"""The replay schedule is a pure function of (trace, seed, rate_scale), pinned by a snapshot; lag
accounting and the request the sender builds."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from slipstream.loadgen.sender import ReplayTarget, build_request, due_count
from slipstream.loadgen.schedule import build_schedule, lag_stats
from slipstream.loadgen.traces import load_trace

SNAPSHOT = Path(__file__).parent / "snapshots" / "schedule_gamma_cv4_seed7_x1.5.json"
TRACE = "gamma:rate=20,cv2=4,duration=3"


def _schedule():
    return build_schedule(load_trace(TRACE, seed=7), seed=7, rate_scale=1.5)


def test_schedule_matches_snapshot():
    got = {"trace": TRACE, "seed": 7, "rate_scale": 1.5, "offsets_ns": _schedule().offsets_ns.tolist()}
    if os.environ.get("SLIPSTREAM_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(json.dumps(got, indent=0) + "\n")
    want = json.loads(SNAPSHOT.read_text())
    assert got == want, "schedule changed; if intended, rerun with SLIPSTREAM_UPDATE_SNAPSHOTS=1"


def test_schedule_is_pure_and_depends_on_each_input():
    a = load_trace(TRACE, seed=7)
    s1, s2 = build_schedule(a, seed=7, rate_scale=1.5), build_schedule(a, seed=7, rate_scale=1.5)
    assert np.array_equal(s1.offsets_ns, s2.offsets_ns)
    assert not np.array_equal(s1.offsets_ns, build_schedule(a, seed=8, rate_scale=1.5).offsets_ns)
    assert len(build_schedule(a, seed=7).offsets_ns) == len(a)
    assert np.all(np.diff(s1.offsets_ns) >= 0)
    with pytest.raises(ValueError):
        s1.offsets_ns[0] = 5  # read-only: a schedule cannot be edited after the fact
    assert s1.request_id("run1", 42) == "run1-00000042"


def test_due_count_sends_bursts_at_once():
    offsets = np.array([0, 10, 10, 10, 50], dtype=np.int64)
    assert due_count(offsets, 0, -1) == 0
    assert due_count(offsets, 0, 10) == 4
    assert due_count(offsets, 4, 49) == 0
    assert due_count(offsets, 4, 50) == 1


def test_lag_stats_detects_a_generator_that_fell_behind():
    sched = np.arange(1000, dtype=np.int64) * 10_000_000  # 100 qps
    ok = lag_stats(sched, sched + 200_000)  # 0.2 ms behind
    assert ok.kept_up and ok.p99_ms == pytest.approx(0.2) and "kept up" in ok.verdict()
    assert ok.achieved_qps == pytest.approx(100.0)
    late = sched + np.linspace(0, 3e9, 1000).astype(np.int64)  # drifts 3 s behind: 75 qps
    bad = lag_stats(sched, late)
    assert not bad.kept_up and bad.max_ms == pytest.approx(3000.0)
    assert bad.achieved_qps == pytest.approx(100 * 9.99 / 12.99, rel=1e-3)
    assert "FELL BEHIND" in bad.verdict() and bad.late_share > 0.99
    with pytest.raises(ValueError):
        lag_stats(sched, sched[:-1])


def test_request_fits_the_input_schema():
    from slipstream.streams import codec

    t = ReplayTarget("demo", "classify", 250.0, "image/raw", accuracy_floor=0.7)
    req = build_request(t, "run-00000001", 1_000_000_000, b"\x01\x02")
    assert req.deadline_ns == 1_250_000_000 and req.accuracy_floor == 0.7
    assert codec.decode_typed("InferenceRequest", codec.encode("InferenceRequest", req)) == req
    assert t.input_topic.endswith(".classify.in")
