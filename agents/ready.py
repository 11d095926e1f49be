"""The ready line a worker prints on stdout once it has its partitions and its model is warm:
``slipstream-worker ready stage=<s> partitions=<n> metrics=<port> at_ns=<t>``. The supervisor, the
tests and the activation-time benchmark wait for it."""
from __future__ import annotations

import asyncio
import time

import faust


def announce_ready(role: str, app: faust.App, metrics_port: int, started: asyncio.Event | None = None) -> None:
    """Print the ready line after each rebalance, once the worker's model is loaded and warm (in a
    task of its own: the rebalance must not wait for it)."""
    async def announce() -> None:
        if started is not None:
            await started.wait()
        parts = sorted(tp.partition for tp in app.consumer.assignment())
        print(f"slipstream-worker ready stage={role} partitions={len(parts)} "
              f"metrics={metrics_port} at_ns={time.time_ns()}", flush=True)

    async def on_rebalance_complete(sender, **kwargs) -> None:
        asyncio.ensure_future(announce())

    app.on_rebalance_complete.connect(on_rebalance_complete)
