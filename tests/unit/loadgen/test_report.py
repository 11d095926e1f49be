"""Reports on known inputs: percentiles, attainment, drops, per-stage breakdown, cost, JSON and text."""
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from slipstream.loadgen.cost import ConfigEvent, events_from_records, step_values, total_cost_usd
from slipstream.loadgen.render import format_table, read_summary, to_jsonable, write_report
from slipstream.loadgen.report import Envelope, reason_category, summarize
from slipstream.loadgen.schedule import lag_stats
from tests.control_records import result as record

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
S = 1_000_000_000


def result(i, latency_ms, status="done", reason="", slo_ms=50, queue_ms=None, variant="v1"):
    created = T0 + i * 10 * MS  # 100 qps
    finished = created + int(latency_ms * MS)
    q = int((queue_ms if queue_ms is not None else latency_ms / 2) * MS)
    return record(
        request_id=f"run-{i:08d}", pipeline="demo", status=status, reason=reason,
        created_ns=created, deadline_ns=created + slo_ms * MS, finished_ns=finished,
        accuracy=0.8 if variant == "v1" else 0.6,
        hops=[{"stage": "a", "variant": variant, "batch_size": 4, "enqueued_ns": created,
               "started_ns": created + q, "finished_ns": finished, "worker": "w"}],
    )


def known_run():
    # 100 done requests with latencies 1..100 ms, 5 deadline drops, 1 error; 110 sent (4 missing)
    res = [result(i, i + 1) for i in range(100)]
    res += [result(100 + j, 5, "dropped", f"deadline: predicted finish {j}.0 ms late") for j in range(4)]
    res += [result(104, 5, "dropped", "stage b: deadline: x"), result(105, 5, "error", "model: boom")]
    return res


def test_percentiles_and_attainment_on_a_known_input():
    s = summarize(known_run(), slo_ms=50, sent=110)
    assert (s.requests, s.results, s.done, s.dropped, s.errors, s.missing) == (110, 106, 100, 5, 1, 4)
    # end to end over all 110 sent, the 10 not done (dropped, error, missing) infinitely late, nearest rank
    assert s.latency.count == 110 and s.latency.p50_ms == 55  # the 55th of 110
    assert s.latency.p95_ms == s.latency.p99_ms == s.latency.max_ms == math.inf  # rank 105 > 100 done
    assert summarize(known_run()[:100], slo_ms=50).latency.p99_ms == 99  # all done: rank 99 of 100
    # 50 requests finish within 50 ms; drops, errors and missing count as misses
    assert s.attainment == pytest.approx(50 / 110)
    assert s.drops_by_reason == {"deadline": 4, "deadline@b": 1}
    assert s.errors_by_reason == {"model": 1}
    assert s.mean_accuracy == pytest.approx(0.8)
    assert s.cdf_ms[0] == 1 and s.cdf_ms[-1] == math.inf and len(s.cdf_ms) == len(s.cdf_q)
    assert max(x for x in s.cdf_ms if x < math.inf) == 100


def test_stage_breakdown_splits_queueing_from_service():
    res = [result(i, 20, queue_ms=5, variant="v1" if i % 4 else "v2") for i in range(40)]
    st, = summarize(res, slo_ms=50).stages
    assert st.stage == "a" and st.items == 40 and st.mean_batch == 4
    assert st.queue.p50_ms == pytest.approx(5) and st.service.p99_ms == pytest.approx(15)
    assert st.residence.p50_ms == pytest.approx(20)
    assert st.variants == {"v1": 30, "v2": 10}
    # a simulated hop knows only the residence
    sim = [replace(r, hops=(replace(r.hops[0], started_ns=None, batch_size=0),)) for r in res]
    st2, = summarize(sim, slo_ms=50, source="simulate").stages
    assert st2.queue.count == 0 and st2.residence.p50_ms == pytest.approx(20) and st2.mean_batch is None


def test_time_series_windows():
    # 0-1 s fast (10 ms), 1-2 s slow (90 ms)
    res = [result(i, 10 if i < 100 else 90) for i in range(200)]
    s = summarize(res, slo_ms=50, window_s=1.0)
    assert s.series.t_s[:2] == (0.0, 1.0)
    assert s.series.sent[:2] == (100, 100)
    assert s.series.p99_ms[0] == pytest.approx(10) and s.series.p99_ms[1] == pytest.approx(90)
    assert s.series.attainment[0] == 1.0 and s.series.attainment[1] == 0.0
    # a window where more than 1 % are not done has an infinite p99 (drops = late)
    res[150] = result(150, 5, "dropped", "deadline: x")
    res[160] = result(160, 5, "error", "model: x")
    s = summarize(res, slo_ms=50, window_s=1.0)
    assert s.series.p99_ms[1] == math.inf and s.series.p50_ms[1] == 90 and s.series.p99_ms[0] == 10


def test_long_runs_get_wider_windows():
    res = [result(0, 1), replace(result(1, 1), created_ns=T0 + 5000 * S, finished_ns=T0 + 5000 * S + MS,
                             deadline_ns=T0 + 5001 * S)]
    s = summarize(res, slo_ms=50)
    assert s.series.window_s == 5.0 and len(s.series.t_s) <= 1200


def test_reason_category():
    assert reason_category("deadline: predicted finish 3 ms") == "deadline"
    assert reason_category("") == "unspecified"
    assert reason_category("bad payload") == "bad payload"
    assert reason_category("stage detect: deadline: predicted finish 3 ms") == "deadline@detect"


def test_cost_follows_the_latest_epoch_and_integrates_exactly():
    prices = {"cpu-1": 0.10, "gpu": 1.00}
    recs = [
        (T0, {"stage": "a", "replicas": 2, "epoch": 1, "hardware": "cpu-1", "cost_per_hour": 0.0}),
        (T0, {"stage": "b", "replicas": 1, "epoch": 1, "hardware": "gpu", "cost_per_hour": 1.0}),
        (T0 + 1800 * S, {"stage": "a", "replicas": 4, "epoch": 2, "hardware": "cpu-1", "cost_per_hour": 0.0}),
        (T0 + 1900 * S, {"stage": "a", "replicas": 9, "epoch": 1, "hardware": "cpu-1"}),  # stale epoch
        (T0 + 2700 * S, {"stage": "a", "replicas": 1, "previous_replicas": 4, "cost_per_hour": 0.0,
                         "partitions": 4, "reason": "down", "pipeline": "p", "at_ns": 0}),  # ScalingAction
    ]
    ev = events_from_records(recs, prices)
    assert [e.replicas for e in ev] == [2, 1, 4, 1]
    assert ev[-1].hardware == "cpu-1" and ev[-1].cost_per_hour == pytest.approx(0.1)
    # a: 0.2 $/h for 30 min, 0.4 for 15 min, 0.1 for 15 min; b: 1 $/h for the hour
    total = total_cost_usd(ev, T0, T0 + 3600 * S)
    assert total == pytest.approx(0.2 / 2 + 0.4 / 4 + 0.1 / 4 + 1.0)
    at = step_values(ev, np.array([T0 - S, T0 + 2000 * S]), "replicas", "a")
    assert at.tolist() == [2, 4]


def test_summary_renders_as_strict_json_and_text(tmp_path):
    ev = [ConfigEvent(T0, "a", 2, 0.5, "cpu-1")]
    sched = np.arange(106) * 10 * MS + T0
    lag = lag_stats(sched, sched + 100_000)
    env = Envelope((0.1, 1.0, 10.0), (300.0, 120.0, 100.0), (250.0, 130.0, 100.0))
    s = summarize(known_run(), slo_ms=50, sent=110, configs=ev, lag=lag, envelope=env,
                  pipeline="demo", label="known")
    assert s.cost_total_usd == pytest.approx(0.5 * s.duration_s / 3600)
    doc = to_jsonable(s)
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text)["lag"]["kept_up"] is True
    assert doc["latency"]["p99_ms"] is None and s.latency.p99_ms == math.inf  # strict JSON: no inf
    table = format_table(s)
    assert "end-to-end (drops = late)       110      55.0      inf      inf" in table
    assert "SLO attainment 45.45%" in table and "deadline 4" in table and "kept up" in table
    files = write_report(s, tmp_path, plots=False)
    assert {f.name for f in files} == {"summary.json", "summary.txt"}
    back = read_summary(tmp_path / "summary.json")  # what slipstream estimate reads a finished run from
    assert back.latency.p99_ms == math.inf and back.series.replicas == s.series.replicas
    assert to_jsonable(back) == doc
    empty = summarize([], slo_ms=50, sent=3)
    assert empty.attainment == 0 and empty.latency.p50_ms == math.inf  # 3 sent, none answered
    json.dumps(to_jsonable(empty), allow_nan=False)
