"""Asking running brokers: metadata round trips (how many brokers a bootstrap lists) and in-sync
replicas, each call bounded by a timeout (a probe, not a user: refused connections are expected).
"""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager


@asynccontextmanager
async def _admin(bootstrap: str, timeout_s: float):
    """An admin client of ``bootstrap`` that gives up after ``timeout_s`` per call (a probe, not a user)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        yield admin
    finally:
        await admin.close()


async def _probe(bootstrap: str, timeout_s: float) -> int:
    async with _admin(bootstrap, timeout_s) as admin:
        await asyncio.wait_for(admin.list_topics(), timeout_s)
        return len((await asyncio.wait_for(admin.describe_cluster(), timeout_s))["brokers"])


def live_brokers(bootstrap: str, timeout_s: float = 3.0) -> int:
    """Brokers the cluster's metadata lists (0 when nothing answers)."""
    import logging

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # refused connections are expected here
    try:
        return asyncio.run(_probe(bootstrap, timeout_s))
    except Exception:
        return 0


def is_ready(bootstrap: str, timeout_s: float = 3.0, brokers: int = 1) -> bool:
    """A metadata round trip succeeds and lists at least ``brokers`` brokers."""
    return live_brokers(bootstrap, timeout_s) >= brokers


async def _out_of_sync(bootstrap: str, node_id: int, timeout_s: float) -> int:
    """Partitions (every topic) that have ``node_id`` as a replica but not in their in-sync set."""
    async with _admin(bootstrap, timeout_s) as admin:
        metas = await asyncio.wait_for(admin.describe_topics(await admin.list_topics()), timeout_s)
        return sum(node_id in p["replicas"] and node_id not in p["isr"] for t in metas for p in t["partitions"])
