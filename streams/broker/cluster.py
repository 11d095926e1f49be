"""The replicated cluster (``slipstream kafka up --brokers n``, chaos): start every node of one KRaft
quorum and wait until each lists all of them, restart one node and wait until it is back in sync,
stop them by their PIDs, report their state.
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Iterable

from .layout import BrokerError, LocalCluster, saved_layout
from .probe import _out_of_sync, broker_version, is_ready, live_brokers
from .process import _cluster_id, _stop_pids, running_jar_version, running_pid, start_process


def cluster_up(c: LocalCluster, timeout_s: float = 180.0, progress=print) -> list[int]:
    """Start every node that is not running (all are needed: the quorum is every node) and wait until
    the cluster lists all of them. Returns the PIDs, node 1 first."""
    nodes = c.nodes
    saved = saved_layout(c.state_dir)
    if saved and {k: saved.get(k) for k in c.shape} != c.shape:
        raise BrokerError(f"cluster {c.name!r} in {c.state_dir} was made with {saved.get('brokers')} brokers and "
                          f"{saved['controllers']} controllers on port {saved.get('port')}: stop it and remove that "
                          f"folder to change its shape")
    if not saved:
        for b in c.broker_nodes:
            if running_pid(b) is None and is_ready(b.bootstrap, 2.0):
                raise BrokerError(f"a broker not started by slipstream already answers on {b.bootstrap}")
    cluster_id = saved.get("cluster_id") or _cluster_id()
    c.state_dir.mkdir(parents=True, exist_ok=True)
    c.layout_file.write_text(json.dumps({**c.shape, "cluster_id": cluster_id}))
    pids = []
    for b in nodes:
        pid = running_pid(b)
        if pid is None:
            pid = start_process(b, cluster_id, progress=lambda _: None)
            progress(f"kafka node {b.node_id} starting (pid {pid}) on {b.bootstrap}")
        pids.append(pid)
    wait_cluster(c, timeout_s)
    quorum = f", {c.controllers} controllers" if c.controllers else ""
    progress(f"kafka cluster {c.name!r} up: {c.brokers} brokers on {c.bootstrap}{quorum} (pids {pids})")
    return pids


def wait_cluster(c: LocalCluster, timeout_s: float = 180.0) -> None:
    """Until every node runs and each one's metadata lists all of them (a client may ask any node: one
    that lists fewer would have new topics created with a smaller replication factor)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for b in c.nodes:
            if running_pid(b) is None:
                tail = b.stdout_file.read_text()[-2000:] if b.stdout_file.exists() else ""
                raise BrokerError(f"kafka node {b.node_id} of cluster {c.name!r} is not running; last output:\n{tail}")
        if all(is_ready(b.bootstrap, 2.0, c.brokers) for b in c.broker_nodes):
            return
        time.sleep(0.5)  # polling separate processes: there is no event to wait on
    raise BrokerError(f"cluster {c.name!r} did not list {c.brokers} brokers on every node of {c.bootstrap} within "
                      f"{timeout_s:.0f} s; see {c.state_dir}/node-*/logs/server.log")


def start_node(c: LocalCluster, node_id: int, timeout_s: float = 120.0) -> int:
    """(Re)start one node of a formatted cluster and wait until every node, the restarted one included,
    lists all brokers (the others may still list a killed node until the controller fences it, so
    asking them alone would prove nothing)."""
    b = c.nodes[node_id - 1]
    pid = running_pid(b) or start_process(b, json.loads(c.layout_file.read_text())["cluster_id"],
                                          progress=lambda _: None)
    wait_cluster(c, timeout_s)
    return pid


# A KRaft voter's own log names each quorum state it enters: "[RaftManager id=2] Completed transition
# to Leader(... epoch=3, ..." on the leader, "Completed transition to FollowerState(fetchTimeoutMs=2000,
# epoch=3, leader=2, ..." on the others.
_RAFT_LEADER = re.compile(r"\[RaftManager id=(\d+)\] Completed transition to Leader\(.*?\bepoch=(\d+)")
_RAFT_FOLLOWER = re.compile(r"Completed transition to FollowerState\(.*?\bepoch=(\d+), leader=(\d+)")


def quorum_leader(lines: Iterable[str]) -> int | None:
    """The KRaft leader (the active controller) of the highest epoch any of ``lines`` (the voters'
    ``server.log`` lines) names, or None."""
    best: tuple[int, int] | None = None  # (epoch, leader)
    for line in lines:
        if "Completed transition to" not in line:
            continue
        if m := _RAFT_LEADER.search(line):
            seen = (int(m.group(2)), int(m.group(1)))
        elif m := _RAFT_FOLLOWER.search(line):
            seen = (int(m.group(1)), int(m.group(2)))
        else:
            continue
        if best is None or seen[0] > best[0]:
            best = seen
    return None if best is None else best[1]


def active_controller(c: LocalCluster) -> int | None:
    """The node that is the cluster's active controller, read from the running voters' logs (a local
    cluster's logs are ours; Kafka tells a client only a random broker as "the controller" in KRaft)."""
    def lines():
        for b in c.voter_nodes:
            if running_pid(b) is not None and b.log_file.exists():
                with b.log_file.open(errors="replace") as f:
                    yield from f
    return quorum_leader(lines())


def wait_in_sync(c: LocalCluster, node_id: int, timeout_s: float = 120.0) -> None:
    """Until the (restarted) node is back in the in-sync replica set of every partition it holds: it
    has rejoined as a replica, not just answered metadata."""
    deadline = time.monotonic() + timeout_s
    left = -1
    while time.monotonic() < deadline:
        try:
            left = asyncio.run(_out_of_sync(c.bootstrap, node_id, 5.0))
        except Exception:  # noqa: BLE001 - a node may still refuse connections while it starts
            left = -1
        if left == 0:
            return
        time.sleep(0.5)  # polling another process's state: there is no event to wait on
    raise BrokerError(f"kafka node {node_id} of cluster {c.name!r} is still out of sync on {left} partition(s) "
                      f"after {timeout_s:.0f} s; see {c.state_dir}/node-{node_id}/logs/server.log")


def cluster_down(c: LocalCluster, grace_s: float = 30.0, progress=print) -> bool:
    """Stop the nodes ``cluster_up`` started (in parallel), by their PIDs. False if none ran."""
    pids = {pid: b for b in c.nodes if (pid := running_pid(b)) is not None}
    for b in c.nodes:
        if running_pid(b) is None:
            b.pid_file.unlink(missing_ok=True)
    if not pids:
        progress(f"kafka cluster {c.name!r} is not running (no live process from its PID files)")
        return False
    _stop_pids(pids, grace_s)
    progress(f"kafka cluster {c.name!r} stopped (pids {sorted(pids)})")
    return True


def cluster_status(c: LocalCluster) -> dict:
    """Each node's process and jar release, how many brokers the metadata lists, and what the brokers
    report of their version (``probe.broker_version``, per running node)."""
    nodes = [{"node": b.node_id, "roles": b.roles, "pid": (pid := running_pid(b)),
              "bootstrap": b.bootstrap if b.is_broker else None, "kafka_version": running_jar_version(b),
              "broker": broker_version(b.bootstrap, 2.0) if pid and b.is_broker else None} for b in c.nodes]
    running = sum(1 for n in nodes if n["pid"])
    listed = live_brokers(c.bootstrap, 2.0) if running else 0
    return {"name": c.name, "bootstrap": c.bootstrap, "brokers": c.brokers, "controllers": c.controllers,
            "running": running, "listed": listed, "ready": running == len(nodes) and listed == c.brokers,
            "nodes": nodes, "state_dir": str(c.state_dir)}
