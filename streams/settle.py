"""The garbage collector of a long-lived process, settled once its set-up is done.

A process's own objects per request are freed by reference counting, but CPython's cycle collector,
run every 700 allocations, also walks the hundreds of thousands of objects the libraries (faust,
aiokafka, the model runtime, the planner) keep for the process's life, and a full collection stops
every thread of the process for as long as that walk takes: 100-140 ms in a load generator hosting
the tuner and the planner (docs/results.md). :func:`settle_gc` collects once, moves every object
alive to the permanent generation (``gc.freeze``), which later collections skip, and collects the
young generation every 20,000 allocations instead of 700.
"""
from __future__ import annotations

import gc

GC_THRESHOLDS = (20_000, 20, 20)  # after settle_gc (CPython's defaults: 700, 10, 10)


def settle_gc(*, again: bool = False) -> bool:
    """Collect, freeze what is alive and collect less often. A stage worker settles once, when first
    ready (a later rebalance freezes nothing new: False); a load generator settles again before each
    replay (``again``), freezing what its planning left."""
    if gc.get_freeze_count() and not again:
        return False
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return True
