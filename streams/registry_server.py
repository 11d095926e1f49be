"""The local schema registry: Apicurio Registry (Confluent-compatible API), built from Maven Central.

``slipstream registry up|down|status`` calls these. ``deploy/registry/pom.xml`` builds the Quarkus app
(``mvn package``: ``target/slipstream-registry-1-runner.jar``); ``up`` starts it on 127.0.0.1 (in-memory
storage: every start is empty), waits until ``/health/ready`` says UP, and keeps its PID and output in
a git-ignored state folder; ``down`` stops only the process ``up`` started, by its PID. Clients use
:attr:`LocalRegistry.url` as ``SLIPSTREAM_SCHEMA_REGISTRY_URL``.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .assets import DEFAULT_STATE_DIR, deploy_dir, staged
from .broker.process import _alive, _need

REGISTRY_DEPLOY = deploy_dir() / "registry"
PORT = 18081


class RegistryServerError(RuntimeError):
    """The local registry cannot be built or started; the message says what to do."""


@dataclass(frozen=True)
class LocalRegistry:
    state_dir: Path = DEFAULT_STATE_DIR / "registry"
    port: int = PORT

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL."""
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    @property
    def jar(self) -> Path:
        return self.state_dir / "build" / "target" / "slipstream-registry-1-runner.jar"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "registry.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "registry.log"


def build(r: LocalRegistry, quiet: bool = True) -> Path:
    """Build the registry with Maven unless its jar is there."""
    if r.jar.is_file():
        return r.jar
    mvn = _need("mvn", "install Maven (Debian: apt-get install maven) to build the registry")
    pom = staged(REGISTRY_DEPLOY, r.state_dir / "build") / "pom.xml"
    cmd = [mvn, "-B", "-f", str(pom), "package"] + (["-q"] if quiet else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not r.jar.is_file():
        raise RegistryServerError(f"mvn could not build the registry (exit {proc.returncode}):\n"
                                  f"{(proc.stdout + proc.stderr)[-2000:]}")
    return r.jar


def running_pid(r: LocalRegistry) -> int | None:
    """The PID of the registry ``up`` started, if that process is alive and runs the registry's jar."""
    try:
        pid = int(r.pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ValueError):
        return None
    return pid if r.jar.name.encode() in cmdline else None


def is_ready(r: LocalRegistry, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{r.port}/health/ready", timeout=timeout_s) as resp:
            return json.loads(resp.read()).get("status") == "UP"
    except (OSError, ValueError):
        return False


def up(r: LocalRegistry, timeout_s: float = 120.0, progress=print) -> int:
    """Build if needed, start (idempotent) and wait until ready; returns the PID."""
    pid = running_pid(r)
    if pid is None:
        jar = build(r).resolve()  # absolute: the process runs in the state directory
        java = _need("java", "install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)")
        r.state_dir.mkdir(parents=True, exist_ok=True)
        with open(r.log_file, "ab") as log:
            proc = subprocess.Popen([java, "-Xmx384m", "-Dquarkus.http.host=127.0.0.1",
                                     f"-Dquarkus.http.port={r.port}", "-jar", str(jar)],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=r.state_dir,
                                    start_new_session=True)
        pid = proc.pid
        r.pid_file.write_text(str(pid))
    deadline = time.monotonic() + timeout_s
    while not is_ready(r):
        if not _alive(pid):
            tail = r.log_file.read_text(errors="replace")[-2000:] if r.log_file.exists() else ""
            raise RegistryServerError(f"the registry (pid {pid}) exited during start-up:\n{tail}")
        if time.monotonic() > deadline:
            raise RegistryServerError(f"the registry (pid {pid}) not ready within {timeout_s:.0f} s; "
                                      f"see {r.log_file}")
        time.sleep(0.2)  # polling a separate process: there is no event to wait on
    progress(f"registry up on {r.url} (pid {pid})")
    return pid


def down(r: LocalRegistry, grace_s: float = 20.0, progress=print) -> bool:
    """Stop the registry ``up`` started (SIGTERM, then SIGKILL after ``grace_s``). False if none ran."""
    pid = running_pid(r)
    if pid is not None:
        os.kill(pid, 15)
        deadline = time.monotonic() + grace_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, 9)
    r.pid_file.unlink(missing_ok=True)
    progress(f"registry stopped (pid {pid})" if pid else "registry is not running")
    return pid is not None


def status(r: LocalRegistry) -> dict:
    pid = running_pid(r)
    return {"pid": pid, "url": r.url, "process": "running" if pid else "stopped",
            "ready": bool(pid) and is_ready(r), "state_dir": str(r.state_dir)}
