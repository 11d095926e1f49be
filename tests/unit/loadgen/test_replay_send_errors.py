"""A request the producer cannot send (no broker within the send timeout) is counted as a send error
and not expected; the replay goes on with the rest instead of crashing (a broker kill in
``slipstream chaos`` once ended the whole run with KafkaTimeoutError)."""
import asyncio
import time

import numpy as np
from aiokafka.errors import KafkaTimeoutError

from loadgen.collect import Collector
from loadgen.replay import ReplayTarget, _send_all
from loadgen.schedule import Schedule


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
    errors = await _send_all(schedule, ReplayTarget("p", "s", 100.0, "text/plain"), producer, lambda i: b"x",
                             collector, time.time_ns(), actual, None)
    assert errors == [2] and producer.calls == 5
    assert collector.sent == {"run-00000000", "run-00000002", "run-00000004"}
    assert [a > 0 for a in actual] == [True, False, True, False, True]
