"""Worker metrics: results observed at the sink (end-to-end latency, SLO met/missed by loadgen's rule),
model info, lag per partition, and the HTTP endpoint's /metrics, /healthz and /readyz."""
from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections import namedtuple
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Histogram

from slipstream.agents.acks import AckTracker
from slipstream.agents.metrics import StageMetrics, observe_many
from slipstream.agents.ready import Readiness, consumer_lag
from slipstream.agents.routing import Out
from slipstream.schemas.records import InferenceResult
from slipstream.streams import topics
from slipstream.streams.metrics_http import LOCAL, version

TP = namedtuple("TP", "topic partition")
MS = 1_000_000
L = {"pipeline": "p", "stage": "s"}


def result(status: str, latency_ms: float, deadline_ms: float = 100) -> InferenceResult:
    return InferenceResult(request_id="r", pipeline="p", status=status, created_ns=0,
                           finished_ns=int(latency_ms * MS), deadline_ns=int(deadline_ms * MS))


def value(m: StageMetrics, name: str, **labels) -> float | None:
    return m.registry.get_sample_value(name, {**L, **labels})


def test_results_on_the_results_topic_count_as_met_or_missed():
    m = StageMetrics.create("p", "s", slo_ms=100)
    res = topics.results("p")
    m.observe_outputs([Out(res, "a", "InferenceResult", result("done", 40)),
                       Out(res, "b", "InferenceResult", result("done", 100)),  # on the deadline: met
                       Out(res, "c", "InferenceResult", result("done", 150)),  # late
                       Out(res, "d", "InferenceResult", result("dropped", 5)),
                       Out(res, "e", "InferenceResult", result("error", 5)),
                       Out(topics.join("p"), "f", "InferenceResult", result("done", 1)),  # a fragment: not yet
                       Out(topics.stage_input("p", "t"), "g", "InferenceRequest", result("done", 1))])
    assert value(m, "slipstream_slo_met_total") == 2
    assert [value(m, "slipstream_slo_missed_total", status=s) for s in ("done", "dropped", "error")] == [1, 1, 1]
    # latency of done results only, with the SLO as a bucket bound
    assert value(m, "slipstream_request_duration_seconds_count") == 3
    assert value(m, "slipstream_request_duration_seconds_bucket", le="0.1") == 2
    assert value(m, "slipstream_slo_seconds") == pytest.approx(0.1)


def test_series_exist_before_the_first_result():
    m = StageMetrics.create("p", "s")
    assert value(m, "slipstream_slo_met_total") == 0
    assert value(m, "slipstream_slo_missed_total", status="dropped") == 0
    for gauge in ("slipstream_queued_requests", "slipstream_replicas", "slipstream_delivery_backlog_windows"):
        assert value(m, gauge) == 0, gauge  # a scrape before the first window reads 0, not nothing
    assert value(m, "slipstream_requests_total") == 0
    assert m.registry.get_sample_value("slipstream_build_info", {"version": version()}) == 1
    assert m.registry.get_sample_value("process_start_time_seconds") is not None


def test_model_info_follows_the_fleet():
    m = StageMetrics.create("p", "s")

    def fleet(*pairs):
        return SimpleNamespace(replicas=[SimpleNamespace(executors={v: SimpleNamespace(digest=d)}) for v, d in pairs])

    m.observe_fleet(fleet(("small", "abc"), ("small", "abc")))
    assert value(m, "slipstream_model_info", variant="small", digest="abc") == 1
    assert value(m, "slipstream_replicas") == 2
    m.observe_fleet(fleet(("big", "def")))
    assert value(m, "slipstream_model_info", variant="small", digest="abc") is None
    assert value(m, "slipstream_model_info", variant="big", digest="def") == 1


def test_lag_per_assigned_partition():
    tp = lambda p: TP("t", p)  # noqa: E731
    parts = {0: (120, 100), 1: (50, None), 2: (None, 3)}  # partition -> (high watermark, committed)
    consumer = SimpleNamespace(assignment=lambda: {tp(p) for p in parts},
                               highwater=lambda t: parts[t.partition][0],
                               _committed_offset={tp(p): c for p, (_, c) in parts.items()})
    assert consumer_lag(consumer) == {("t", 0): 20, ("t", 1): 50}  # partition 2: no fetch yet
    acks = AckTracker()  # the worker's own finished prefix counts when it is ahead of faust's commits
    for off in (100, 101, 102):
        acks.read(tp(0), off, None)
    acks.done(tp(0), 100), acks.done(tp(0), 101)
    assert consumer_lag(consumer, acks) == {("t", 0): 18, ("t", 1): 50}
    m = StageMetrics.create("p", "s")
    m.observe_lag({("t", 0): 20, ("t", 1): 50})
    m.observe_lag({("t", 1): 7})
    assert value(m, "slipstream_consumer_lag_records", topic="t", partition="0") is None
    assert value(m, "slipstream_consumer_lag_records", topic="t", partition="1") == 7


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_endpoint_serves_metrics_health_and_readiness():
    m = StageMetrics.create("p", "s", slo_ms=100)
    started = asyncio.Event()
    ready = Readiness(started)
    ep = m.serve(LOCAL, ready.reason)
    try:
        base = f"http://{ep.addr}"
        assert ep.addr.port > 0
        assert get(base + "/healthz") == (200, "ok\n")
        assert get(base + "/readyz") == (503, "model not warm\n")
        started.set()
        assert get(base + "/readyz") == (503, "no partitions assigned\n")
        ready.partitions = 2
        assert get(base + "/readyz") == (200, "ready\n")
        status, body = get(base + "/metrics")
        assert status == 200 and 'slipstream_slo_met_total{pipeline="p",stage="s"} 0.0' in body
        assert get(base + "/nothing")[0] == 404
    finally:
        ep.close()


def test_healthz_answers_503_with_the_reason_while_the_process_is_not_live():
    m = StageMetrics.create("p", "s", slo_ms=100)
    problem: list[str] = []
    ep = m.serve(LOCAL, alive=lambda: problem[0] if problem else None)
    try:
        base = f"http://{ep.addr}"
        assert get(base + "/healthz") == (200, "ok\n")
        problem.append("model run s/v of 1 on replica 0: 3.0 s past its deadline")
        assert get(base + "/healthz") == (503, problem[0] + "\n")
    finally:
        ep.close()



def test_observe_many_counts_as_observe_does_one_by_one():
    reg = CollectorRegistry()
    h = Histogram("h", "", ["k"], buckets=(0.01, 0.1, 1.0), registry=reg)
    amounts = [0.0, 0.005, 0.01, 0.0100001, 0.1, 0.5, 1.0, 2.0, 2.0, -1.0]  # one on a bound counts in that bucket
    for a in amounts:
        h.labels(k="one").observe(a)
    observe_many(h.labels(k="many"), amounts)
    observe_many(h.labels(k="many"), [])

    def read(k):
        return {(part, le, reg.get_sample_value(f"h_{part}", {"k": k, **({"le": le} if le else {})}))
                for part, les in (("bucket", ("0.01", "0.1", "1.0", "+Inf")), ("sum", ("",)), ("count", ("",)))
                for le in les}

    assert read("many") == read("one")
    assert ("bucket", "0.01", 4.0) in read("many")
