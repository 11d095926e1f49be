"""Where the local brokers live: one KRaft node (:class:`LocalBroker`: ports, state folder, Kafka
release and its jars, replication of the internal topics, its KRaft roles) and a replicated cluster of
them (:class:`LocalCluster`, whose shape is kept in its ``cluster.json``), with the defaults ``slipstream
kafka`` uses. The release is ``versions.DEFAULT_VERSION`` unless a caller or ``SLIPSTREAM_KAFKA_VERSION``
names another supported one; its jars are built in ``build_root/kafka-<version>``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..assets import DEFAULT_STATE_DIR
from ..config import kafka_version_from_env
from .versions import DEFAULT_VERSION, KafkaRelease, release

SINGLE_PORT = 19092
CLUSTER_PORT = 19094
CLUSTER_NAME = "cluster"
LOOPBACK = "127.0.0.1"  # every listener's address unless the single broker is given another
COMBINED, BROKER_ONLY, CONTROLLER_ONLY = "broker,controller", "broker", "controller"  # a node's process.roles
# A cluster's controller-only nodes by default: Kafka's production layout. A killed broker then costs
# its session timeout alone; on combined nodes, killing the active controller adds the quorum's fetch
# timeout and an election before that session starts to count (docs/chaos.md).
DEDICATED_CONTROLLERS = 3


class BrokerError(RuntimeError):
    """The local broker cannot be set up or started; the message says what to do."""


@dataclass(frozen=True)
class LocalBroker:
    """One KRaft node: broker and controller in one process (``roles`` COMBINED), or one of them."""

    state_dir: Path
    port: int = SINGLE_PORT
    controller_port: int = SINGLE_PORT + 1
    heap: str = "512m"
    node_id: int = 1
    voters: str = ""  # controller.quorum.voters; "" = this node alone
    replication: int = 1  # of the internal topics (offsets, transactions) and the broker default
    min_isr: int = 1
    build_root: Path = DEFAULT_STATE_DIR / "build"  # the jars' Maven builds, one folder per release
    advertised_port: int | None = None  # the port clients are sent to (a proxy in front); None: port
    kafka_version: str = DEFAULT_VERSION  # one of versions.SUPPORTED
    host: str = LOOPBACK  # the client listener's address, listened on and advertised (pods: a bridge's)
    roles: str = COMBINED

    def __post_init__(self) -> None:
        release(self.kafka_version)  # refuses an unsupported one by name
        if self.roles not in (COMBINED, BROKER_ONLY, CONTROLLER_ONLY):
            raise ValueError(f"roles must be {COMBINED!r}, {BROKER_ONLY!r} or {CONTROLLER_ONLY!r}, got {self.roles!r}")

    @property
    def is_broker(self) -> bool:
        """Serves clients (a controller-only node has no client listener)."""
        return self.roles != CONTROLLER_ONLY

    @property
    def is_voter(self) -> bool:
        return self.roles != BROKER_ONLY

    @property
    def release(self) -> KafkaRelease:
        return release(self.kafka_version)

    @property
    def build_dir(self) -> Path:
        """This release's Maven build (``deploy/kafka`` staged; ``target/kafka-libs`` the jars)."""
        return self.build_root / f"kafka-{self.kafka_version}"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def quorum_voters(self) -> str:
        return self.voters or f"{self.node_id}@127.0.0.1:{self.controller_port}"

    @property
    def libs(self) -> Path:
        return self.build_dir / "target" / "kafka-libs"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "kafka.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "server.log"

    @property
    def stdout_file(self) -> Path:
        return self.state_dir / "logs" / "stdout.log"

    @property
    def version_file(self) -> Path:
        """The release that formatted (and last ran) this node's data."""
        return self.state_dir / "kafka.version"


@dataclass(frozen=True)
class LocalCluster:
    """``brokers`` brokers (nodes 1..brokers) and one KRaft quorum: ``controllers`` controller-only nodes
    after them, or, with 0, the brokers themselves (combined nodes)."""

    name: str
    state_dir: Path
    brokers: int = 3
    port: int = CLUSTER_PORT
    heap: str = "384m"
    build_root: Path = DEFAULT_STATE_DIR / "build"  # the jars' Maven builds, one folder per release
    kafka_version: str = DEFAULT_VERSION
    controllers: int = 0
    controller_heap: str = "256m"

    def __post_init__(self) -> None:
        if self.brokers < 1 or self.controllers < 0:
            raise ValueError(f"brokers must be >= 1 and controllers >= 0, got {self.brokers} and {self.controllers}")
        release(self.kafka_version)

    @property
    def nodes(self) -> tuple[LocalBroker, ...]:
        """Every node, node i at ``nodes[i - 1]``: the brokers, then the controllers. Node i listens on
        ``port + 2(i-1)`` (clients; brokers only) and the next port (the quorum; voters only)."""
        count = self.brokers + self.controllers
        voter_ids = range(self.brokers + 1, count + 1) if self.controllers else range(1, count + 1)
        voters = ",".join(f"{i}@127.0.0.1:{self.port + 2 * i - 1}" for i in voter_ids)
        rf = min(3, self.brokers)
        roles = [COMBINED] * self.brokers if not self.controllers else [BROKER_ONLY] * self.brokers + [CONTROLLER_ONLY] * self.controllers
        return tuple(LocalBroker(self.state_dir / f"node-{i}", self.port + 2 * (i - 1), self.port + 2 * i - 1,
                                 self.heap if r != CONTROLLER_ONLY else self.controller_heap, i, voters, rf, min(2, rf),
                                 self.build_root, kafka_version=self.kafka_version, roles=r)
                     for i, r in enumerate(roles, start=1))

    @property
    def broker_nodes(self) -> tuple[LocalBroker, ...]:
        return tuple(n for n in self.nodes if n.is_broker)

    @property
    def voter_nodes(self) -> tuple[LocalBroker, ...]:
        return tuple(n for n in self.nodes if n.is_voter)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.broker_nodes)

    @property
    def layout_file(self) -> Path:
        return self.state_dir / "cluster.json"

    @property
    def shape(self) -> dict:
        """What ``cluster.json`` keeps besides the cluster id (``saved_layout`` reads it back)."""
        return {"brokers": self.brokers, "port": self.port, "controllers": self.controllers}


def saved_layout(folder: Path) -> dict:
    """The shape and cluster id ``folder/cluster.json`` keeps ({} before the cluster's first start); one
    written before controller-only nodes existed is a combined cluster (controllers 0). Raises ValueError
    for a file that is not JSON."""
    try:
        return {"controllers": 0, **json.loads((folder / "cluster.json").read_text())}
    except FileNotFoundError:
        return {}


def default_broker(state: str | os.PathLike | None = None, port: int = SINGLE_PORT, *,
                   root: Path = DEFAULT_STATE_DIR, version: str | None = None, host: str = LOOPBACK) -> LocalBroker:
    """The single broker; its state in ``state`` (default ``root/kafka``), its jars under ``root/build``;
    Kafka ``version`` (default: ``SLIPSTREAM_KAFKA_VERSION``, else ``versions.DEFAULT_VERSION``); its clients'
    listener on ``host`` (the controller's stays on the loopback)."""
    return LocalBroker(Path(state) if state else root / "kafka", port, port + 1, build_root=root / "build",
                       kafka_version=version or kafka_version_from_env() or DEFAULT_VERSION, host=host)


def local_cluster(brokers: int | None = None, name: str | None = None, port: int | None = None,
                  state: str | os.PathLike | None = None, *, root: Path = DEFAULT_STATE_DIR,
                  version: str | None = None, controllers: int | None = None) -> LocalCluster:
    """The cluster named ``name`` (default ``cluster``). Brokers, port and controllers not given are read
    from the cluster's ``cluster.json`` when it was started before, else 3, 19094 and
    ``DEDICATED_CONTROLLERS`` (a cluster.json without controllers is a combined one: 0)."""
    name = name or CLUSTER_NAME
    folder = Path(state) if state else root / f"kafka-{name}"
    try:
        saved = saved_layout(folder)
    except ValueError:
        saved = {}
    return LocalCluster(name, folder, brokers or saved.get("brokers", 3), port or saved.get("port", CLUSTER_PORT),
                        build_root=root / "build", kafka_version=version or kafka_version_from_env() or DEFAULT_VERSION,
                        controllers=saved.get("controllers", DEDICATED_CONTROLLERS) if controllers is None else controllers)
