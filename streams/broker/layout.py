"""Where the local brokers live: one KRaft node (:class:`LocalBroker`: ports, state folder, Kafka
release and its jars, replication of the internal topics) and a replicated cluster of them
(:class:`LocalCluster`, whose shape is kept in its ``cluster.json``), with the defaults ``slipstream
kafka`` uses. The release is ``versions.DEFAULT_VERSION`` unless a caller or ``SLIPSTREAM_KAFKA_VERSION``
names another supported one; its jars are built in ``build_root/kafka-<version>``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from slipstream.streams.assets import DEFAULT_STATE_DIR
from slipstream.streams.broker.versions import DEFAULT_VERSION, KafkaRelease, release
from slipstream.streams.config import kafka_version_from_env

SINGLE_PORT = 19092
CLUSTER_PORT = 19094
CLUSTER_NAME = "cluster"
LOOPBACK = "127.0.0.1"  # every listener's address unless the single broker is given another


class BrokerError(RuntimeError):
    """The local broker cannot be set up or started; the message says what to do."""


@dataclass(frozen=True)
class LocalBroker:
    """One KRaft node (broker and controller in one process)."""

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

    def __post_init__(self) -> None:
        release(self.kafka_version)  # refuses an unsupported one by name

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
    """``brokers`` nodes that form one KRaft quorum; every node is a voter."""

    name: str
    state_dir: Path
    brokers: int = 3
    port: int = CLUSTER_PORT
    heap: str = "384m"
    build_root: Path = DEFAULT_STATE_DIR / "build"  # the jars' Maven builds, one folder per release
    kafka_version: str = DEFAULT_VERSION

    def __post_init__(self) -> None:
        if self.brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {self.brokers}")
        release(self.kafka_version)

    @property
    def nodes(self) -> tuple[LocalBroker, ...]:
        ports = [(self.port + 2 * i, self.port + 2 * i + 1) for i in range(self.brokers)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        rf = min(3, self.brokers)
        return tuple(LocalBroker(self.state_dir / f"node-{i + 1}", p, c, self.heap, i + 1, voters, rf, min(2, rf),
                                 self.build_root, kafka_version=self.kafka_version)
                     for i, (p, c) in enumerate(ports))

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def layout_file(self) -> Path:
        return self.state_dir / "cluster.json"


def default_broker(state: str | os.PathLike | None = None, port: int = SINGLE_PORT, *,
                   root: Path = DEFAULT_STATE_DIR, version: str | None = None, host: str = LOOPBACK) -> LocalBroker:
    """The single broker; its state in ``state`` (default ``root/kafka``), its jars under ``root/build``;
    Kafka ``version`` (default: ``SLIPSTREAM_KAFKA_VERSION``, else ``versions.DEFAULT_VERSION``); its clients'
    listener on ``host`` (the controller's stays on the loopback)."""
    return LocalBroker(Path(state) if state else root / "kafka", port, port + 1, build_root=root / "build",
                       kafka_version=version or kafka_version_from_env() or DEFAULT_VERSION, host=host)


def local_cluster(brokers: int | None = None, name: str | None = None, port: int | None = None,
                  state: str | os.PathLike | None = None, *, root: Path = DEFAULT_STATE_DIR,
                  version: str | None = None) -> LocalCluster:
    """The cluster named ``name`` (default ``cluster``). Brokers and port not given are read from the
    cluster's ``cluster.json`` when it was started before, else 3 and 19094."""
    name = name or CLUSTER_NAME
    folder = Path(state) if state else root / f"kafka-{name}"
    try:
        saved = json.loads((folder / "cluster.json").read_text())
    except (FileNotFoundError, ValueError):
        saved = {}
    return LocalCluster(name, folder, brokers or saved.get("brokers", 3), port or saved.get("port", CLUSTER_PORT),
                        build_root=root / "build",
                        kafka_version=version or kafka_version_from_env() or DEFAULT_VERSION)
