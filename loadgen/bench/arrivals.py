"""Bytes the tuner and the planner service read per arrival (``python -m slipstream.loadgen.bench.arrivals``).

For each payload size, ``n`` requests are produced at ``rate_qps`` to a fresh input topic while a reader
follows it; the figure is the bytes the reader's Kafka connections received, divided by the arrivals
it reported. Two readers, each alone in its run:

- ``offsets``: ``slipstream.streams.control_io.KafkaArrivals``, what the tuner and the planner service use
  (end offsets every ``poll_ms``, plus the control topic);
- ``records``: the previous way, a group-less consumer fetching the input topic's records to read
  their timestamps.

Bytes are counted where asyncio hands a connection's received data to aiokafka's reader
(``asyncio.StreamReader.feed_data``), in this process only: every response, framing included.
"""
from __future__ import annotations

import asyncio
import sys
import time
import uuid
from contextlib import contextmanager

from ...streams import admin, client, kafka as kclient, topics
from ...streams.config import KafkaSettings
from ...streams.control_io import KafkaArrivals
from ...streams.topics import TopicSpec

MAX_MESSAGE = str(4 * 1024 * 1024)


@contextmanager
def counting_received_bytes():
    """Count the bytes every asyncio stream connection receives while the block runs."""
    box = [0]
    original = asyncio.StreamReader.feed_data

    def feed_data(self, data):
        box[0] += len(data)
        return original(self, data)

    asyncio.StreamReader.feed_data = feed_data
    try:
        yield box
    finally:
        asyncio.StreamReader.feed_data = original


async def _produce(settings: KafkaSettings, pipeline: str, topic: str, payload: bytes, n: int,
                   rate_qps: float) -> None:
    prod = kclient.producer(settings)
    await prod.start()
    try:
        t0 = time.monotonic()
        futs = []
        for i in range(n):
            await asyncio.sleep(max(t0 + i / rate_qps - time.monotonic(), 0))
            req = client.request_record(pipeline, uuid.uuid4().hex, time.time_ns(), 10_000.0,
                                        "application/octet-stream", payload)
            futs.append(await kclient.send(prod, topic, "InferenceRequest", req, key=req.request_id))
        await asyncio.gather(*futs)
    finally:
        await prod.stop()


async def _read_offsets(settings: KafkaSettings, pipeline: str, n: int, started: asyncio.Event) -> int:
    reader = KafkaArrivals(settings, pipeline, "src", on_stage_config=lambda rec: None, lookback_s=0)
    await reader.start()
    started.set()
    seen = 0
    try:
        async for chunk in reader:
            seen += len(chunk)
            if seen >= n:
                return seen
    finally:
        await reader.stop()
    return seen


async def _read_records(settings: KafkaSettings, topic: str, n: int, started: asyncio.Event) -> int:
    cons = kclient.consumer(settings, topic, group_id=None, enable_auto_commit=False,
                            auto_offset_reset="latest")
    await cons.start()
    await cons.getmany(timeout_ms=200)  # assigned, at the end
    started.set()
    seen = 0
    try:
        while seen < n:
            batch = await cons.getmany(timeout_ms=100, max_records=20_000)
            seen += sum(len([r.timestamp for r in rs]) for rs in batch.values())
    finally:
        await cons.stop()
    return seen


async def measure(settings: KafkaSettings, payload_bytes: int, n: int, rate_qps: float, how: str) -> dict:
    pipeline = f"arrivals-{uuid.uuid4().hex[:6]}"
    topic = topics.stage_input(pipeline, "src")
    await admin.ensure_topics(settings, [TopicSpec(topic, 1, {"max.message.bytes": MAX_MESSAGE}),
                                         TopicSpec(topics.control(pipeline), 1)])
    started = asyncio.Event()
    with counting_received_bytes() as received:
        read = asyncio.ensure_future(_read_offsets(settings, pipeline, n, started) if how == "offsets"
                                     else _read_records(settings, topic, n, started))
        await asyncio.wait([read, asyncio.ensure_future(started.wait())], return_when=asyncio.FIRST_COMPLETED)
        if read.done():
            read.result()  # the reader failed before it started: raise its error
        base = received[0]  # start-up (metadata, lookback) is not per arrival
        await _produce(settings, pipeline, topic, b"x" * payload_bytes, n, rate_qps)
        seen = await asyncio.wait_for(read, 60)
        total = received[0] - base
    return {"reader": how, "payload_bytes": payload_bytes, "arrivals": seen, "bytes": total,
            "bytes_per_arrival": total / max(seen, 1)}


def run(settings: KafkaSettings, n: int = 100, rate_qps: float = 50.0) -> list[dict]:
    return [asyncio.run(measure(settings, size, n, rate_qps, how))
            for size in (1024, 1024 * 1024) for how in ("offsets", "records")]


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'reader':<9}{'payload':>10}{'arrivals':>10}{'bytes read':>14}{'bytes/arrival':>15}"]
    lines += [f"{r['reader']:<9}{r['payload_bytes']:>10}{r['arrivals']:>10}{r['bytes']:>14}"
              f"{r['bytes_per_arrival']:>15.0f}" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":  # python -m slipstream.loadgen.bench.arrivals [N] [RATE]
    a = sys.argv[1:]
    print(format_rows(run(KafkaSettings.from_env(), int(a[0]) if a else 100,
                          float(a[1]) if len(a) > 1 else 50.0)))
