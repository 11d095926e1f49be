"""How many partitions a stage's input topic needs: a pure decision, applied by the service.

A Kafka consumer group gives each partition to one consumer, a stage's worker process (which holds
k replicas), so workers beyond the partition count sit idle. Partitions only grow (Kafka cannot
shrink a topic) and growing reshuffles key hashing and makes every worker rebalance, so grow rarely
and with headroom: when the workers a stage is about to run exceed its partitions, go to the next
power of two at or above ``workers * headroom``. With the default headroom 1.5 a stage at 4
partitions that scales to 5 workers gets 8, and 6, 7, 8 workers then need no growth.
"""
from __future__ import annotations

import math

MAX_PARTITIONS = 4096


def target_partitions(workers: int, current: int, *, headroom: float = 1.5,
                      max_partitions: int = MAX_PARTITIONS) -> int:
    """The partition count to have *before* running ``workers`` worker processes (never below ``current``)."""
    if workers < 0 or current < 1 or headroom < 1.0:
        raise ValueError(f"need workers >= 0, current >= 1, headroom >= 1; got {workers}, {current}, "
                         f"{headroom}")
    if workers <= current:
        return current
    wanted = 1 << math.ceil(math.log2(math.ceil(workers * headroom)))
    return max(current, min(max_partitions, wanted))
