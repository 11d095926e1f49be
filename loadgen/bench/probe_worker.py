"""A bare consumer-group member that prints the worker ready line: ``python -m slipstream.loadgen.bench.probe_worker``.

``slipstream bench tuner --probe`` times it to measure the Kafka part of a replica's activation (process
start, group join, rebalance of the members already there) without a model: a lower bound of what
``slipstream worker`` needs, which adds imports and model loading. It prints
``slipstream-worker ready stage=<stage> partitions=<list>`` on its first assignment and then consumes
(committing nothing) until SIGTERM.
"""
from __future__ import annotations

import argparse
import asyncio
import signal


from ...streams import kafka as kclient
from ...streams.config import KafkaSettings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--stage", default="probe")
    ap.add_argument("--bootstrap", required=True)
    args = ap.parse_args()
    asyncio.run(run(KafkaSettings(bootstrap=args.bootstrap), args.topic, args.group, args.stage))


async def run(settings: KafkaSettings, topic: str, group: str, stage: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    cons = kclient.consumer(settings, topic, group_id=group, enable_auto_commit=False)
    await cons.start()
    announced = False
    try:
        while not stop.is_set():
            await cons.getmany(timeout_ms=100)
            parts = sorted(tp.partition for tp in cons.assignment())
            if parts and not announced:
                print(f"slipstream-worker ready stage={stage} partitions={','.join(map(str, parts))}", flush=True)
                announced = True
    finally:
        await cons.stop()


if __name__ == "__main__":
    main()
