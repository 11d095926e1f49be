"""The embedded default broker: Apache Kafka (KRaft, combined mode) on loopback, from Maven Central jars.

``slipstream kafka up|down|status|logs`` calls these. Jars come from ``deploy/kafka/pom.xml`` (``mvn
package`` copies the broker's runtime classpath to ``deploy/kafka/target/kafka-libs``); data, logs and
the PID file live in a git-ignored state folder (``.state/kafka`` by default). ``up`` is idempotent and
waits for a metadata round trip, not an open port; ``down`` stops only the process ``up`` started, by
its PID.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
KAFKA_DEPLOY = REPO_ROOT / "deploy" / "kafka"


class BrokerError(RuntimeError):
    """The local broker cannot be set up or started; the message says what to do."""


@dataclass(frozen=True)
class LocalBroker:
    state_dir: Path
    port: int = 19092
    controller_port: int = 19093
    heap: str = "512m"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def libs(self) -> Path:
        return KAFKA_DEPLOY / "target" / "kafka-libs"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "kafka.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "server.log"

    @property
    def stdout_file(self) -> Path:
        return self.state_dir / "logs" / "stdout.log"


def default_broker(state: str | os.PathLike | None = None, port: int = 19092) -> LocalBroker:
    return LocalBroker(Path(state) if state else REPO_ROOT / ".state" / "kafka", port, port + 1)


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
    cmd = [mvn, "-B", "-f", str(KAFKA_DEPLOY / "pom.xml"), "package"] + (["-q"] if quiet else [])
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


def _write_config(b: LocalBroker) -> Path:
    text = (KAFKA_DEPLOY / "server.properties").read_text()
    text = (text.replace("@DATA_DIR@", str(b.state_dir / "data")).replace("@PORT@", str(b.port))
            .replace("@CONTROLLER_PORT@", str(b.controller_port)))
    cfg = b.state_dir / "server.properties"
    cfg.write_text(text)
    return cfg


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (what random-uuid prints)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


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


async def _probe(bootstrap: str, timeout_s: float) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        await asyncio.wait_for(admin.list_topics(), timeout_s)
    finally:
        await admin.close()


def is_ready(bootstrap: str, timeout_s: float = 3.0) -> bool:
    """A metadata round trip succeeds."""
    import logging

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # refused connections are expected here
    try:
        asyncio.run(_probe(bootstrap, timeout_s))
        return True
    except Exception:
        return False


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
    java = _need("java", "install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)")
    progress("fetching Kafka jars (Maven Central) ..." if not b.libs.is_dir() else "kafka jars present")
    fetch_jars(b)
    (b.state_dir / "data").mkdir(parents=True, exist_ok=True)
    (b.state_dir / "logs").mkdir(parents=True, exist_ok=True)
    cfg = _write_config(b)
    cp = f"{b.libs}/*"
    if not (b.state_dir / "data" / "meta.properties").exists():
        fmt = subprocess.run([java, *_java_opts(b), "-cp", cp, "kafka.tools.StorageTool", "format",
                              "-t", _cluster_id(), "-c", str(cfg), "--ignore-formatted"],
                             capture_output=True, text=True)
        if fmt.returncode != 0:
            raise BrokerError(f"kafka storage format failed:\n{(fmt.stdout + fmt.stderr)[-2000:]}")
    with open(b.stdout_file, "ab") as out:
        proc = subprocess.Popen([java, *_java_opts(b), "-cp", cp, "kafka.Kafka", str(cfg)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    b.pid_file.write_text(str(proc.pid))
    progress(f"kafka starting (pid {proc.pid}), waiting for a metadata round trip on {b.bootstrap}")
    wait_ready(b, proc.pid, timeout_s, proc)
    progress(f"kafka up on {b.bootstrap} (pid {proc.pid})")
    return proc.pid


def _alive(pid: int, proc: subprocess.Popen | None) -> bool:
    if proc is not None:
        return proc.poll() is None
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def wait_ready(b: LocalBroker, pid: int, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid, proc):
            tail = b.stdout_file.read_text()[-2000:] if b.stdout_file.exists() else ""
            raise BrokerError(f"kafka (pid {pid}) exited during start-up; last output:\n{tail}")
        if is_ready(b.bootstrap, 2.0):
            return
        time.sleep(0.5)  # polling a separate process: there is no event to wait on
    raise BrokerError(f"kafka (pid {pid}) did not answer on {b.bootstrap} within {timeout_s:.0f} s; "
                      f"see {b.log_file}")


def down(b: LocalBroker, grace_s: float = 30.0, progress=print) -> bool:
    """Stop the broker ``up`` started (SIGTERM, then SIGKILL after ``grace_s``). False if none ran."""
    pid = running_pid(b)
    if pid is None:
        progress("kafka is not running (no live process from the PID file)")
        b.pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while running_pid(b) == pid and time.monotonic() < deadline:
        time.sleep(0.2)
    if running_pid(b) == pid:
        os.kill(pid, signal.SIGKILL)
    b.pid_file.unlink(missing_ok=True)
    progress(f"kafka stopped (pid {pid})")
    return True


def status(b: LocalBroker) -> dict:
    pid = running_pid(b)
    return {"pid": pid, "bootstrap": b.bootstrap, "process": "running" if pid else "stopped",
            "ready": bool(pid) and is_ready(b.bootstrap, 2.0), "state_dir": str(b.state_dir)}
