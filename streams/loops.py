"""The control-loop shape the planner service and the tuner service share: a step every interval
until a stop event, with a feeder task (arrivals from Kafka) running beside it."""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable


async def periodically(step: Callable[[], Awaitable[None]], interval_s: float, stop: asyncio.Event, *,
                       feeder: asyncio.Task | None = None) -> None:
    """Await ``step()`` every ``interval_s`` until ``stop`` is set. A feeder task that fails ends the
    loop with its exception; the feeder is cancelled when the loop ends."""
    task = feeder
    try:
        while not stop.is_set():
            if task is not None and task.done():
                task.result()  # re-raise a failed source
                break
            await step()
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
            except TimeoutError:
                pass
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
