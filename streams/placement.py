"""Where a stage's replicas run: inside worker processes.

A *replica* (what the planner plans and the tuner scales) is one loaded model: an executor per variant
on its own model thread. A stage worker process holds up to ``max_per_worker`` of them behind its one
queue, so adding or removing a replica inside a worker is not a consumer-group change and never
pauses the replicas already serving (Triton's instance groups, Clockwork's per-GPU workers). Only
when a stage needs more replicas than one worker may hold does the count of worker processes (the
consumers of the stage's group) change, and only that causes a rebalance.

The worker (``agents``) and the actuators (``tuner``) both read the layout from here, so they agree
on how many processes and how many replicas each without talking to each other.

A stage may also keep *standby* workers: processes beyond the ones its replicas need, each holding
as many replicas, loaded and warm, and a member of the stage's group. With Kafka a standby is not
idle: it shares the stage's partitions with the others (a member with none only when the topic has
fewer partitions than the group has members). What it buys is failover: when a worker dies its
partitions move to members that already hold the model, instead of waiting for a new process to start
and load it (docs/kafka.md, "Failover").

The cores a process may use are its CPU limit when its cgroup sets one (a Kubernetes pod's
``resources.limits.cpu``, ``docker run --cpus``), not the node's count: ``cgroup_cpu_limit`` reads
cgroup v2's ``cpu.max`` or v1's ``cpu.cfs_quota_us``/``cpu.cfs_period_us``.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    workers: int  # worker processes the replicas need (consumers of the stage's group)
    per_worker: int  # replicas in each worker
    standby: int = 0  # warm worker processes beyond ``workers``, each with ``per_worker`` too

    @property
    def replicas(self) -> int:
        """Replicas the workers run (at least what was asked for; the remainder is rounded up),
        standby workers not counted."""
        return self.workers * self.per_worker

    @property
    def processes(self) -> int:
        """Worker processes to run: the replicas' workers and the standby ones."""
        return self.workers + self.standby


def layout(replicas: int, max_per_worker: int, standby: int = 0) -> Layout:
    """The fewest workers that hold ``replicas``, at most ``max_per_worker`` each, the replicas spread
    evenly over them, and ``standby`` warm workers more."""
    if replicas < 1 or max_per_worker < 1:
        raise ValueError(f"need replicas >= 1 and max_per_worker >= 1, got {replicas}, {max_per_worker}")
    if standby < 0:
        raise ValueError(f"standby workers must be >= 0, got {standby}")
    workers = math.ceil(replicas / max_per_worker)
    return Layout(workers, math.ceil(replicas / workers), standby)


def cpu_limit_of(cpu_max: str | None = None, quota_us: str | None = None,
                 period_us: str | None = None) -> float | None:
    """CPUs a cgroup allows, from the text of v2's ``cpu.max`` ("QUOTA PERIOD", QUOTA "max" = no
    limit) or v1's ``cpu.cfs_quota_us`` (-1 = no limit) and ``cpu.cfs_period_us``; None: no limit."""
    if cpu_max is not None:
        quota, _, period = cpu_max.strip().partition(" ")
        if quota == "max":
            return None
        return int(quota) / int(period or 100_000)
    if quota_us is None or int(quota_us) <= 0:
        return None
    return int(quota_us) / int(period_us or 100_000)


def cgroup_cpu_limit(root: str | Path = "/sys/fs/cgroup", own: str | None = None) -> float | None:
    """This process's CPU limit: the tightest one set on its own cgroup or an ancestor (v2 first, then
    v1's cpu controller); None: none set or no cgroup filesystem. ``own`` is the text of
    ``/proc/self/cgroup``; in a container with its own cgroup namespace the path is "/" (the mount's
    root), on a host it names the group (``systemd-run -p CPUQuota``, a v1 ``cgcreate`` group)."""
    root = Path(root)
    try:
        own = Path("/proc/self/cgroup").read_text() if own is None else own
    except OSError:
        own = ""
    paths = dict(_cgroup_paths(own))
    if (root / "cgroup.controllers").is_file() or (root / "cpu.max").is_file():
        mount, path = root, paths.get("", "/")
    else:
        mount = next((root / v1 for v1 in ("cpu", "cpu,cpuacct", "cpuacct,cpu") if (root / v1).is_dir()), None)
        if mount is None:
            return None
        path = paths.get("cpu", "/")
    try:
        limits = [lim for d in _self_and_ancestors(mount, path) if (lim := _limit_in(d)) is not None]
    except (OSError, ValueError):
        return None
    return min(limits, default=None)


def _limit_in(group: Path) -> float | None:
    """The limit one cgroup directory sets itself (v2 ``cpu.max`` or v1 ``cpu.cfs_*``); None: none."""
    if (group / "cpu.max").is_file():
        return cpu_limit_of((group / "cpu.max").read_text())
    if (group / "cpu.cfs_quota_us").is_file():
        return cpu_limit_of(None, (group / "cpu.cfs_quota_us").read_text(),
                            (group / "cpu.cfs_period_us").read_text())
    return None


def _cgroup_paths(own: str):
    """(controller, path) pairs of ``/proc/self/cgroup`` lines "ID:CONTROLLERS:PATH"; v2's is ""."""
    for line in own.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                yield controller, parts[2]


def _self_and_ancestors(mount: Path, path: str) -> list[Path]:
    """The group's directory under ``mount`` and each parent up to ``mount`` (the ones that exist)."""
    rel = Path(path.strip() or "/").relative_to("/")
    dirs = [mount / rel, *(mount / p for p in rel.parents)]
    return [d for d in dirs if d.is_dir()]


def available_cpus(limit: float | None = None, cpu_count: int | None = None) -> int:
    """Whole cores this process may keep busy: its cgroup's CPU limit rounded down (at least 1), or the
    host's count when no limit is set. ``limit``/``cpu_count`` default to this process's."""
    n = (cpu_count if cpu_count is not None else os.cpu_count()) or 1
    lim = cgroup_cpu_limit() if limit is None else limit
    return n if lim is None else max(1, min(n, math.floor(lim + 1e-9)))


def cores_left(reserve_cores: float, cpu_count: int | None = None) -> int:
    """Model threads one stage may run on this host: the cores not wholly taken by what else runs
    there (``reserve_cores``: the broker, the load generator, the control plane; a fraction of a core
    is load, not a pinned core), at least 1. 2 cores, 0.5 reserved: 2; 4 cores, 1.5 reserved: 3."""
    n = available_cpus() if cpu_count is None else cpu_count
    if reserve_cores < 0:
        raise ValueError(f"reserve_cores must be >= 0, got {reserve_cores}")
    return max(1, math.ceil((n or 1) - reserve_cores - 1e-9))


def replica_cap(asked: int | None, limit: float | None, cpu_count: int | None = None) -> int:
    """Replicas a worker may hold: ``asked`` (``--max-replicas``; default the cores available), never
    more than the whole cores of the cgroup's CPU ``limit`` when one is set (a pod sized for k
    replicas cannot run more without throttling all of them)."""
    cores = available_cpus(limit, cpu_count) if limit is not None else None
    want = asked if asked is not None else (cores or available_cpus(None, cpu_count))
    return want if cores is None else max(1, min(want, cores))
