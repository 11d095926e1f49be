"""The embedded brokers: Apache Kafka (KRaft, combined mode) on loopback, from Maven Central jars.

``slipstream kafka up|down|status|logs`` calls these. Jars come from ``deploy/kafka/pom.xml`` (``mvn
package`` copies the broker's runtime classpath to ``deploy/kafka/target/kafka-libs``); data, logs and
the PID file live in a git-ignored state folder. ``up`` is idempotent and waits for a metadata round
trip, not an open port; ``down`` stops only the processes ``up`` started, by their PIDs.

Two shapes, one node type (:class:`LocalBroker`):

- the single broker (``kafka up``): node 1 on 19092 (controller 19093), state ``.state/kafka``,
  replication factor 1;
- a replicated cluster (``kafka up --brokers 3``): nodes 1..n, node i on ``port + 2(i-1)`` (controller
  one above), 19094..19099 by default, all of them KRaft voters, state ``.state/kafka-<name>/node-<i>``
  (default name ``cluster``), internal topics with replication min(3, n) and min ISR min(2, n). The
  cluster's layout (brokers, base port, cluster id) is kept in ``cluster.json`` there, so ``down`` and
  ``status`` find it by name.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from streams.assets import DEFAULT_STATE_DIR, deploy_dir, staged

KAFKA_DEPLOY = deploy_dir() / "kafka"
SINGLE_PORT = 19092
CLUSTER_PORT = 19094
CLUSTER_NAME = "cluster"


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
    build_dir: Path = DEFAULT_STATE_DIR / "build" / "kafka"  # the jars' Maven build
    advertised_port: int | None = None  # the port clients are sent to (a proxy in front); None: port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

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


@dataclass(frozen=True)
class LocalCluster:
    """``brokers`` nodes that form one KRaft quorum; every node is a voter."""

    name: str
    state_dir: Path
    brokers: int = 3
    port: int = CLUSTER_PORT
    heap: str = "384m"
    build_dir: Path = DEFAULT_STATE_DIR / "build" / "kafka"  # the jars' Maven build

    def __post_init__(self) -> None:
        if self.brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {self.brokers}")

    @property
    def nodes(self) -> tuple[LocalBroker, ...]:
        ports = [(self.port + 2 * i, self.port + 2 * i + 1) for i in range(self.brokers)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        rf = min(3, self.brokers)
        return tuple(LocalBroker(self.state_dir / f"node-{i + 1}", p, c, self.heap, i + 1, voters, rf, min(2, rf),
                                 self.build_dir)
                     for i, (p, c) in enumerate(ports))

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def layout_file(self) -> Path:
        return self.state_dir / "cluster.json"


def default_broker(state: str | os.PathLike | None = None, port: int = SINGLE_PORT, *,
                   root: Path = DEFAULT_STATE_DIR) -> LocalBroker:
    """The single broker; its state in ``state`` (default ``root/kafka``), its jars under ``root/build``."""
    return LocalBroker(Path(state) if state else root / "kafka", port, port + 1, build_dir=root / "build" / "kafka")


def local_cluster(brokers: int | None = None, name: str | None = None, port: int | None = None,
                  state: str | os.PathLike | None = None, *, root: Path = DEFAULT_STATE_DIR) -> LocalCluster:
    """The cluster named ``name`` (default ``cluster``). Brokers and port not given are read from the
    cluster's ``cluster.json`` when it was started before, else 3 and 19094."""
    name = name or CLUSTER_NAME
    folder = Path(state) if state else root / f"kafka-{name}"
    try:
        saved = json.loads((folder / "cluster.json").read_text())
    except (FileNotFoundError, ValueError):
        saved = {}
    return LocalCluster(name, folder, brokers or saved.get("brokers", 3), port or saved.get("port", CLUSTER_PORT),
                        build_dir=root / "build" / "kafka")


def _need(tool: str, hint: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise BrokerError(f"{tool} not found on PATH: {hint}")
    return path


def fetch_jars(b: LocalBroker, quiet: bool = True) -> Path:
    """Download the broker jars with Maven unless they are already there."""
    if b.libs.is_dir() and any(b.libs.glob("kafka_2.13-*.jar")):
        return b.libs
    mvn = _need("mvn", "install Maven (Debian: apt-get install maven) to fetch the Kafka jars")
    _need("java", "install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)")
    pom = staged(KAFKA_DEPLOY, b.build_dir) / "pom.xml"
    cmd = [mvn, "-B", "-f", str(pom), "package"] + (["-q"] if quiet else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BrokerError(f"mvn could not fetch the Kafka jars (exit {proc.returncode}):\n"
                          f"{(proc.stdout + proc.stderr)[-2000:]}")
    return b.libs


def _java_opts(b: LocalBroker) -> list[str]:
    return [f"-Xms{b.heap}", f"-Xmx{b.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={b.state_dir / 'logs'}",
            f"-Dlog4j.configuration=file:{KAFKA_DEPLOY / 'log4j.properties'}"]


def render_config(b: LocalBroker) -> str:
    """deploy/kafka/server.properties with this node's placeholders filled."""
    text = (KAFKA_DEPLOY / "server.properties").read_text()
    for key, value in {"DATA_DIR": b.state_dir / "data", "PORT": b.port, "CONTROLLER_PORT": b.controller_port,
                       "ADVERTISED_PORT": b.advertised_port or b.port,
                       "NODE_ID": b.node_id, "VOTERS": b.quorum_voters, "RF": b.replication,
                       "MIN_ISR": b.min_isr}.items():
        text = text.replace(f"@{key}@", str(value))
    return text


def _write_config(b: LocalBroker) -> Path:
    cfg = b.state_dir / "server.properties"
    cfg.write_text(render_config(b))
    return cfg


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (what random-uuid prints). Like
    Kafka's Uuid.randomUuid, never one starting with '-': the storage tool would read it as an option."""
    import base64

    while (cid := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cid


def running_pid(b: LocalBroker) -> int | None:
    """The PID of the broker ``up`` started, if that process is still alive and is a Kafka broker."""
    try:
        pid = int(b.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return None
    return pid if b"kafka.Kafka" in cmdline else None


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


def start_process(b: LocalBroker, cluster_id: str | None = None, progress=print) -> int:
    """Format the node's storage (first start only) and start its JVM; returns the PID (not ready yet)."""
    java = _need("java", "install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)")
    progress("fetching Kafka jars (Maven Central) ..." if not b.libs.is_dir() else "kafka jars present")
    fetch_jars(b)
    (b.state_dir / "data").mkdir(parents=True, exist_ok=True)
    (b.state_dir / "logs").mkdir(parents=True, exist_ok=True)
    cfg = _write_config(b)
    cp = f"{b.libs}/*"
    if not (b.state_dir / "data" / "meta.properties").exists():
        fmt = subprocess.run([java, *_java_opts(b), "-cp", cp, "kafka.tools.StorageTool", "format",
                              "-t", cluster_id or _cluster_id(), "-c", str(cfg), "--ignore-formatted"],
                             capture_output=True, text=True)
        if fmt.returncode != 0:
            raise BrokerError(f"kafka storage format failed:\n{(fmt.stdout + fmt.stderr)[-2000:]}")
    with open(b.stdout_file, "ab") as out:
        proc = subprocess.Popen([java, *_java_opts(b), "-cp", cp, "kafka.Kafka", str(cfg)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    b.pid_file.write_text(str(proc.pid))
    # the java launcher re-executes itself once: until then /proc/<pid>/cmdline is empty and
    # running_pid would call the new broker dead
    deadline = time.monotonic() + 10.0
    while running_pid(b) != proc.pid and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc.pid


def up(b: LocalBroker, timeout_s: float = 120.0, progress=print) -> int:
    """Start the broker (or find it running) and wait until it answers metadata requests."""
    pid = running_pid(b)
    if pid is not None:
        wait_ready(b, pid, timeout_s)
        progress(f"kafka already up on {b.bootstrap} (pid {pid})")
        return pid
    if is_ready(b.bootstrap, 2.0):
        raise BrokerError(f"a broker not started by slipstream already answers on {b.bootstrap}; "
                          "use it through SLIPSTREAM_BOOTSTRAP or stop it first")
    pid = start_process(b, progress=progress)
    progress(f"kafka starting (pid {pid}), waiting for a metadata round trip on {b.bootstrap}")
    wait_ready(b, pid, timeout_s)
    progress(f"kafka up on {b.bootstrap} (pid {pid})")
    return pid


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)  # reap our own child if it exited (no zombie answering kill 0)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _died(b: LocalBroker, pid: int) -> BrokerError:
    tail = b.stdout_file.read_text()[-2000:] if b.stdout_file.exists() else ""
    return BrokerError(f"kafka node {b.node_id} (pid {pid}) exited during start-up; last output:\n{tail}")


def wait_ready(b: LocalBroker, pid: int, timeout_s: float, brokers: int = 1, bootstrap: str | None = None) -> None:
    """Until ``bootstrap`` (default: this node) lists ``brokers`` brokers; fails early if ``pid`` dies."""
    bootstrap = bootstrap or b.bootstrap
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            raise _died(b, pid)
        if is_ready(bootstrap, 2.0, brokers):
            return
        time.sleep(0.5)  # polling a separate process: there is no event to wait on
    raise BrokerError(f"kafka (pid {pid}) did not answer on {bootstrap} with {brokers} broker(s) within "
                      f"{timeout_s:.0f} s; see {b.log_file}")


def _stop_pids(pids: dict[int, LocalBroker], grace_s: float) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(running_pid(b) == pid for pid, b in pids.items()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid, b in pids.items():
        if running_pid(b) == pid:
            os.kill(pid, signal.SIGKILL)
        b.pid_file.unlink(missing_ok=True)


def down(b: LocalBroker, grace_s: float = 30.0, progress=print) -> bool:
    """Stop the broker ``up`` started (SIGTERM, then SIGKILL after ``grace_s``). False if none ran."""
    pid = running_pid(b)
    if pid is None:
        progress("kafka is not running (no live process from the PID file)")
        b.pid_file.unlink(missing_ok=True)
        return False
    _stop_pids({pid: b}, grace_s)
    progress(f"kafka stopped (pid {pid})")
    return True


def status(b: LocalBroker) -> dict:
    pid = running_pid(b)
    return {"pid": pid, "bootstrap": b.bootstrap, "process": "running" if pid else "stopped",
            "ready": bool(pid) and is_ready(b.bootstrap, 2.0), "state_dir": str(b.state_dir)}


# ---- the replicated cluster


def cluster_up(c: LocalCluster, timeout_s: float = 180.0, progress=print) -> list[int]:
    """Start every node that is not running (all are needed: the quorum is every node) and wait until
    the cluster lists all of them. Returns the PIDs, node 1 first."""
    nodes = c.nodes
    saved = json.loads(c.layout_file.read_text()) if c.layout_file.exists() else {}
    if saved and (saved.get("brokers"), saved.get("port")) != (c.brokers, c.port):
        raise BrokerError(f"cluster {c.name!r} in {c.state_dir} was made with {saved.get('brokers')} brokers "
                          f"on port {saved.get('port')}: stop it and remove that folder to change its shape")
    if not saved:
        for b in nodes:
            if running_pid(b) is None and is_ready(b.bootstrap, 2.0):
                raise BrokerError(f"a broker not started by slipstream already answers on {b.bootstrap}")
    cluster_id = saved.get("cluster_id") or _cluster_id()
    c.state_dir.mkdir(parents=True, exist_ok=True)
    c.layout_file.write_text(json.dumps({"brokers": c.brokers, "port": c.port, "cluster_id": cluster_id}))
    pids = []
    for b in nodes:
        pid = running_pid(b)
        if pid is None:
            pid = start_process(b, cluster_id, progress=lambda _: None)
            progress(f"kafka node {b.node_id} starting (pid {pid}) on {b.bootstrap}")
        pids.append(pid)
    wait_cluster(c, timeout_s)
    progress(f"kafka cluster {c.name!r} up: {c.brokers} brokers on {c.bootstrap} (pids {pids})")
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
        if all(is_ready(b.bootstrap, 2.0, c.brokers) for b in c.nodes):
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


async def _out_of_sync(bootstrap: str, node_id: int, timeout_s: float) -> int:
    """Partitions (every topic) that have ``node_id`` as a replica but not in their in-sync set."""
    async with _admin(bootstrap, timeout_s) as admin:
        metas = await asyncio.wait_for(admin.describe_topics(await admin.list_topics()), timeout_s)
        return sum(node_id in p["replicas"] and node_id not in p["isr"] for t in metas for p in t["partitions"])


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
    nodes = [{"node": b.node_id, "pid": running_pid(b), "bootstrap": b.bootstrap} for b in c.nodes]
    running = sum(1 for n in nodes if n["pid"])
    listed = live_brokers(c.bootstrap, 2.0) if running else 0
    return {"name": c.name, "bootstrap": c.bootstrap, "brokers": c.brokers, "running": running,
            "listed": listed, "ready": running == c.brokers and listed == c.brokers,
            "nodes": nodes, "state_dir": str(c.state_dir)}
