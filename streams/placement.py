"""Where a stage's replicas run: model instances inside worker processes.

A *replica* (what the planner plans and the tuner scales) is one model instance: an executor copy on
its own model thread. A stage worker process holds up to ``max_instances`` of them behind its one
queue, so adding or removing a replica inside a worker is not a consumer-group change and never
pauses the instances already serving (Triton's instance groups, Clockwork's per-GPU workers). Only
when a stage needs more replicas than one worker may hold does the count of worker processes (the
consumers of the stage's group) change, and only that causes a rebalance.

The worker (``agents``) and the actuators (``tuner``) both read the layout from here, so they agree
on how many processes and how many instances each without talking to each other.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    workers: int  # worker processes (consumers of the stage's group)
    instances: int  # model instances in each worker

    @property
    def replicas(self) -> int:
        """Instances actually running (at least what was asked for; the remainder is rounded up)."""
        return self.workers * self.instances


def layout(replicas: int, max_instances: int) -> Layout:
    """The fewest workers that hold ``replicas`` instances, the instances spread evenly over them."""
    if replicas < 1 or max_instances < 1:
        raise ValueError(f"need replicas >= 1 and max_instances >= 1, got {replicas}, {max_instances}")
    workers = math.ceil(replicas / max_instances)
    return Layout(workers, math.ceil(replicas / workers))


def cores_left(reserve_cores: float, cpu_count: int | None = None) -> int:
    """Model threads one stage may run on this host: the cores not wholly taken by what else runs
    there (``reserve_cores``: the broker, the load generator, the control plane; a fraction of a core
    is load, not a pinned core), at least 1. 2 cores, 0.5 reserved: 2; 4 cores, 1.5 reserved: 3."""
    n = os.cpu_count() if cpu_count is None else cpu_count
    if reserve_cores < 0:
        raise ValueError(f"reserve_cores must be >= 0, got {reserve_cores}")
    return max(1, math.ceil((n or 1) - reserve_cores - 1e-9))
