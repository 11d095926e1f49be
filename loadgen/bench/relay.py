"""The baseline of the data-plane benchmark: a plain consume -> produce relay with aiokafka (through
``slipstream.streams.kafka``'s thin wrappers), committing after the produce is delivered, as a stage worker does.
It says it is ready once it holds its partitions. Each relay appends its produce time (epoch ns) as a
``RELAY_HEADER`` header, so the benchmark can time every hop as a stage worker's ``HopTiming`` does.

    python -m slipstream.loadgen.bench.relay SRC DST GROUP
"""
from __future__ import annotations

import asyncio
import sys
import time

from aiokafka import ConsumerRebalanceListener

from ...streams import kafka as kclient
from ...streams.config import KafkaSettings

RELAY_HEADER = "relay-produced-ns"


class _Assigned(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def on_partitions_revoked(self, revoked) -> None:
        pass

    async def on_partitions_assigned(self, assigned) -> None:
        if assigned:
            self.event.set()


async def relay(settings: KafkaSettings, src: str, dst: str, group: str) -> None:
    """Relay src to dst; ready (the line on stdout) once it holds partitions, as a stage worker's
    ready line comes after its assignment, so neither's timed rounds include a group join."""
    cons = kclient.consumer(settings, group_id=group, enable_auto_commit=False)
    assigned = _Assigned()
    cons.subscribe([src], listener=assigned)
    prod = kclient.producer(settings)
    await cons.start()
    await prod.start()
    # the first fetch starts at the assignment, before the ready line, as a worker's consumer fetches
    # on assignment: without it the relay's first position lookup and fetch (~70 ms) fell in its round
    first = asyncio.ensure_future(cons.getmany(timeout_ms=100, max_records=500))
    await assigned.event.wait()
    print(f"relay ready {src} -> {dst}", flush=True)
    try:
        while True:
            batch = await first if first is not None else await cons.getmany(timeout_ms=100, max_records=500)
            first = None
            futs = [await prod.send(dst, m.value, key=m.key,
                                    headers=[*m.headers, (RELAY_HEADER, str(time.time_ns()).encode())])
                    for ms in batch.values() for m in ms]
            if futs:
                await asyncio.gather(*futs)
                await cons.commit()
    finally:
        await cons.stop()
        await prod.stop()


if __name__ == "__main__":
    src, dst, group = sys.argv[1:4]
    try:
        asyncio.run(relay(KafkaSettings.from_env(), src, dst, group))
    except KeyboardInterrupt:
        pass
