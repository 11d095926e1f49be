"""A request the producer cannot send (no broker within the send timeout) is counted as a send error
and not expected; the replay goes on with the rest instead of crashing (a broker kill in
``slipstream chaos`` once ended the whole run with KafkaTimeoutError)."""
import asyncio
import json
import time

import numpy as np
from aiokafka.errors import KafkaTimeoutError

from slipstream.loadgen.collect import Collector
from slipstream.loadgen.sender import ReplayTarget, kafka_sender, send_all
from slipstream.loadgen.schedule import Schedule


class Producer:
    """Refuses the sends whose number is in ``refused`` as aiokafka does when no broker answers."""

    def __init__(self, refused: set[int]) -> None:
        self.refused, self.calls = refused, 0

    async def send(self, topic, value, key=None, timestamp_ms=None, headers=None):
        self.calls += 1
        if self.calls - 1 in self.refused:
            raise KafkaTimeoutError()
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


async def test_a_send_that_times_out_is_counted_and_the_rest_are_sent():
    schedule = Schedule(np.zeros(5, dtype=np.int64), seed=0, rate_scale=1.0)
    collector = Collector("run")
    actual = np.zeros(5, dtype=np.int64)
    producer = Producer(refused={1, 3})
    send = kafka_sender(ReplayTarget("p", "s", 100.0, "text/plain"), producer)
    errors = await send_all(schedule, send, b"x", collector, time.time_ns(), actual, None)
    assert errors == [2] and producer.calls == 5
    assert collector.sent == {"run-00000000", "run-00000002", "run-00000004"}
    assert [a > 0 for a in actual] == [True, False, True, False, True]


def answer(code: int, params: dict) -> tuple[bytes, dict]:
    head = json.dumps({"parameters": params}).encode()
    return head, {"Inference-Header-Content-Length": str(len(head))}


def test_a_gateway_answer_is_the_result_of_the_request_sent_with_the_clients_times():
    from slipstream.loadgen.replay import http_result

    body, h = answer(429, {"retry_after_s": 2})
    shed = http_result("run-1", 100, 400.0, 250, 429, body, h, pipeline="demo")
    assert (shed.status, shed.reason[:9], shed.pipeline) == ("dropped", "shed: 429", "demo")
    assert (shed.created_ns, shed.deadline_ns, shed.finished_ns) == (100, 100 + 400 * 1_000_000, 250)
    done = {"request_id": "gw-7", "status": "dropped", "reason": "deadline: late", "latency_ms": 1.0,
            "deadline_ms": 400.0, "accuracy": 0.75, "content_type": "x",
            "hops": [{"stage": "a", "variant": "v", "batch_size": 1, "enqueued_ns": 1, "started_ns": 2, "finished_ns": 3,
                      "worker": "w", "service_ms": 1e-6}],
            "created_ns": 1, "deadline_ns": 2, "finished_ns": 3}
    body, h = answer(504, done)
    got = http_result("run-2", 100, 400.0, 250, 504, body, h)
    assert (got.request_id, got.status, got.reason, got.accuracy, got.hops, got.pipeline) == \
        ("run-2", "dropped", "deadline: late", 0.75, (), "")
    body, h = answer(504, {"status": "pending"})
    assert http_result("run-3", 100, 400.0, 250, 504, body, h).reason.startswith("deadline: 504")
    assert http_result("run-4", 100, 400.0, 250, 503, b"down", {}).status == "error"
    assert http_result("run-5", 100, 400.0, 250, 0, b"refused", {}).reason.startswith("no answer")
