"""Reading topics back in the integration tests."""
from __future__ import annotations

import asyncio

from streams import kafka as kclient


async def drain(settings, topic: str, n: int, timeout_s: float = 30.0) -> list:
    """The first ``n`` records of ``topic`` (raw aiokafka records), from the beginning."""
    cons = kclient.consumer(settings, topic, group_id=None)
    await cons.start()
    got = []
    try:
        async with asyncio.timeout(timeout_s):
            while len(got) < n:
                for records in (await cons.getmany(timeout_ms=300)).values():
                    got.extend(records)
    finally:
        await cons.stop()
    return got
