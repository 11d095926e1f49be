"""The single broker (``slipstream kafka up|down|status``): start it or find it running, wait until
it answers metadata requests, stop it by its PID, and report its state.
"""
from __future__ import annotations

import time

from .layout import BrokerError, LocalBroker
from .probe import broker_version, is_ready
from .process import _alive, _died, _stop_pids, running_jar_version, running_pid, start_process


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
    """The process, whether it answers, the release of its jars and what the broker itself reports of
    its version (``probe.broker_version``)."""
    pid = running_pid(b)
    ready = bool(pid) and is_ready(b.bootstrap, 2.0)
    return {"pid": pid, "bootstrap": b.bootstrap, "process": "running" if pid else "stopped", "ready": ready,
            "kafka_version": running_jar_version(b), "broker": broker_version(b.bootstrap) if ready else None,
            "state_dir": str(b.state_dir)}
