"""The request path both transports share, up to where it would produce (no Kafka): a request the
pipeline cannot serve in time is shed with 429, its Retry-After and the prediction, and counted."""
import asyncio
import time

from slipstream.streams.config import KafkaSettings
from slipstream.streams.spec import parse_pipeline

from slipstream.gateway import oip
from slipstream.gateway.core import Gateway

MS = 1_000_000


def test_a_request_that_cannot_be_served_in_time_is_shed_with_retry_after():
    pipe = parse_pipeline({"name": "p", "slo_ms": 100, "hardware": {"c": {"kind": "cpu", "cost_per_hour": 0.1}},
                           "stages": [{"name": "s", "variants": [{"name": "a", "model": "noop", "accuracy": 0.7}]}]})
    gw = Gateway(pipe, KafkaSettings.from_env({}))
    gw.not_ready = lambda: None  # the readers' state; what is tested is the decision after it
    t0 = time.time_ns() - 1100 * MS  # the path reads the outcomes at the real clock's now
    for i in range(10):  # 10 answers of 20 ms in 200 ms busy: 50 req/s, base 20 ms
        gw.outcomes.admitted(t0 + i * 100 * MS)
        gw.outcomes.left(t0 + i * 100 * MS + 20 * MS, answered=True, done_latency_ms=20.0)
    for _ in range(20):  # 20 ahead at 50 req/s: 400 ms > the 100 ms budget
        gw.outcomes.admitted(t0 + 1000 * MS)
    call = oip.parse_infer(b'{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}', {})
    a = asyncio.run(gw.answer(call, time.time_ns()))
    assert a.code == 429 and a.retry_after_s is not None and a.retry_after_s >= 1
    assert a.parameters["retry_after_s"] == a.retry_after_s and a.parameters["budget_ms"] == 100
    assert a.message.startswith("shed: predicted")
    assert gw.metrics.shed.labels("p")._value.get() == 1 and gw.metrics.requests.labels("p", "429")._value.get() == 1


def test_a_handoff_out_of_the_control_rules_ranges_is_skipped_counted_and_never_reaches_shedding():
    from aiokafka.structs import ConsumerRecord

    from slipstream.streams import codec, kafka as kclient

    pipe = parse_pipeline({"name": "p", "slo_ms": 100, "hardware": {"c": {"kind": "cpu", "cost_per_hour": 0.1}},
                           "stages": [{"name": "s", "variants": [{"name": "a", "model": "noop", "accuracy": 0.7}]}]})
    gw = Gateway(pipe, KafkaSettings.from_env({}))

    def handoff(mu_qps: float, offset: int) -> ConsumerRecord:
        value = codec.encode("TunerHandoff", {
            "pipeline": "p", "epoch": 0, "mean_rate_qps": 1.0, "windows_s": [1.0], "rates_qps": [1.0], "at_ns": 0,
            "stages": [{"stage": "s", "replicas": 1, "mu_qps": mu_qps, "visit_ratio": 1.0}]})
        return ConsumerRecord("slipstream.p.control", 0, offset, 0, 0, b"~handoff", value, None, 8, len(value),
                              kclient.headers_for("TunerHandoff"))

    gw.control.add([handoff(5e-324, 3)])
    assert gw.control.planned_qps() is None and gw.metrics.control_invalid.labels("p")._value.get() == 1
    gw.control.add([handoff(40.0, 4)])
    assert gw.control.planned_qps() == 40.0
    gw.control.add([handoff(5e-324, 5)])  # a later bad one changes nothing
    assert gw.control.planned_qps() == 40.0 and gw.metrics.control_invalid.labels("p")._value.get() == 2
