"""A node's JVM: the jars of its Kafka release (Maven, one build folder per release), its
``server.properties``, storage formatting, start, the PID file and stop by PID (SIGTERM, then SIGKILL).
Nothing here asks the broker anything (``probe`` does).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

from ..assets import deploy_dir, staged
from .layout import BrokerError, LocalBroker

KAFKA_DEPLOY = deploy_dir() / "kafka"


def _need(tool: str, hint: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise BrokerError(f"{tool} not found on PATH: {hint}")
    return path


def fetch_jars(b: LocalBroker, quiet: bool = True) -> Path:
    """Download the jars of the node's Kafka release with Maven unless they are already there."""
    pom = staged(KAFKA_DEPLOY, b.build_dir) / "pom.xml"
    if pom.read_bytes() != (KAFKA_DEPLOY / "pom.xml").read_bytes():  # a stale copy: build again
        shutil.rmtree(b.build_dir)
        pom = staged(KAFKA_DEPLOY, b.build_dir) / "pom.xml"
    if (b.libs / f"kafka_2.13-{b.kafka_version}.jar").is_file():
        return b.libs
    mvn = _need("mvn", "install Maven (Debian: apt-get install maven) to fetch the Kafka jars")
    _need("java", "install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)")
    cmd = [mvn, "-B", "-f", str(pom), f"-Dkafka.version={b.kafka_version}", "-P", b.release.maven_profile,
           "package"] + (["-q"] if quiet else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BrokerError(f"mvn could not fetch the Kafka jars (exit {proc.returncode}):\n"
                          f"{(proc.stdout + proc.stderr)[-2000:]}")
    return b.libs


def _java_opts(b: LocalBroker) -> list[str]:
    return [f"-Xms{b.heap}", f"-Xmx{b.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={b.state_dir / 'logs'}",
            f"-D{b.release.log_config_property}=file:{KAFKA_DEPLOY / b.release.log_config}"]


# a broker's session and heartbeat (deploy/kafka/server.properties says why a cluster's differ)
CLUSTER_LIVENESS_MS = {"BROKER_SESSION_MS": 3000, "BROKER_HEARTBEAT_MS": 500}
KAFKA_LIVENESS_MS = {"BROKER_SESSION_MS": 9000, "BROKER_HEARTBEAT_MS": 2000}  # Kafka's defaults


def listener_lines(b: LocalBroker) -> str:
    """The node's ``process.roles`` and listeners: a broker's client listener (advertised, and between
    brokers), a voter's quorum listener on the loopback."""
    client, quorum = f"PLAINTEXT://{b.host}:{b.port}", f"CONTROLLER://127.0.0.1:{b.controller_port}"
    lines = [f"process.roles={b.roles}", "listeners=" + ",".join(
        [client] * b.is_broker + [quorum] * b.is_voter)]
    if b.is_broker:
        lines += [f"advertised.listeners=PLAINTEXT://{b.host}:{b.advertised_port or b.port}",
                  "inter.broker.listener.name=PLAINTEXT"]
    return "\n".join(lines)


def render_config(b: LocalBroker) -> str:
    """deploy/kafka/server.properties, plus the release's own settings, with this node's placeholders filled."""
    text = (KAFKA_DEPLOY / "server.properties").read_text()
    if b.release.extra_properties:
        text += f"# Kafka {b.release.major}.x (streams/broker/versions.py)\n" + "".join(
            f"{line}\n" for line in b.release.extra_properties)
    for key, value in {"DATA_DIR": b.state_dir / "data", "LISTENERS": listener_lines(b), "NODE_ID": b.node_id,
                       "VOTERS": b.quorum_voters, "RF": b.replication, "MIN_ISR": b.min_isr, **(CLUSTER_LIVENESS_MS if b.replication > 1 else KAFKA_LIVENESS_MS)}.items():
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


def running_jar_version(b: LocalBroker) -> str | None:
    """The Kafka release of the jars the running broker process loaded (its ``-cp`` folder), not the
    one this LocalBroker would start."""
    pid = running_pid(b)
    if pid is None:
        return None
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except FileNotFoundError:
        return None
    cp = args[args.index("-cp") + 1] if "-cp" in args else ""
    jars = sorted(Path(cp.rstrip("*")).glob("kafka_2.13-*.jar")) if cp else []
    return jars[0].name.removeprefix("kafka_2.13-").removesuffix(".jar") if jars else None


def data_version(b: LocalBroker) -> str | None:
    """The Kafka release that formatted (and last ran) the node's data; None when it is not formatted.
    Data without a recorded release (no ``kafka.version`` file) is taken as 3.9.1's."""
    if not (b.state_dir / "data" / "meta.properties").exists():
        return None
    try:
        return b.version_file.read_text().strip()
    except FileNotFoundError:
        return "3.9.1"  # a state dir without kafka.version holds the data of Kafka 3.9.1


def check_data_version(b: LocalBroker) -> None:
    """Refuse to start an older release on data a newer one wrote (its metadata version is too new for
    it); a newer release upgrades older data in place (KRaft keeps the finalized metadata.version)."""
    was = data_version(b)
    if was is not None and _key(was) > b.release.key:
        raise BrokerError(f"the data in {b.state_dir} was written by Kafka {was}, which Kafka {b.kafka_version} "
                          f"cannot read: use another --state, or stop the broker and remove that folder")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def start_process(b: LocalBroker, cluster_id: str | None = None, progress=print) -> int:
    """Format the node's storage (first start only) and start its JVM; returns the PID (not ready yet)."""
    java = _need("java", "install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)")
    check_data_version(b)
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
    b.version_file.write_text(b.kafka_version)
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
