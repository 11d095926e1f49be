"""Actuators: real child processes (a tiny python loop), partition growth rule (Kubernetes: test_k8s.py)."""
from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest
import yaml

from slipstream.streams.procs import worker_argv
from slipstream.tuner.actuators import DryRunActuator, LocalProcessActuator
from slipstream.tuner.partitions import target_partitions
from slipstream.tuner.supervisor import Supervisor

SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"]
# ignores SIGTERM, so only SIGKILL after the grace period stops it
STUBBORN = [sys.executable, "-c",
            "import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('armed', flush=True)\nwhile True: time.sleep(0.05)"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until(pred, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


@pytest.fixture
def local():
    act = LocalProcessActuator(lambda stage: SLEEPER, grace_s=2.0, restart_backoff_s=(0.0, 0.0))
    yield act
    act.close()


def test_set_replicas_is_idempotent_and_removes_newest_first(local):
    local.set_replicas("detect", 3)
    pids = local.pids("detect")
    assert len(pids) == 3 and all(alive(p) for p in pids)
    local.set_replicas("detect", 3)
    assert local.pids("detect") == pids  # nothing restarted
    local.set_replicas("detect", 1)
    assert local.pids("detect") == pids[:1]  # the oldest survives
    assert not alive(pids[1]) and not alive(pids[2])  # reaped: waited for, not zombies
    local.set_replicas("detect", 2)
    now = local.pids("detect")
    assert now[0] == pids[0] and now[1] not in pids
    with pytest.raises(ValueError):
        local.set_replicas("detect", -1)


def test_crashed_worker_is_reaped_and_replaced_by_reconcile(local):
    local.set_replicas("classify", 2)
    first, second = local.pids("classify")
    os.kill(second, 9)
    wait_until(lambda: local.replicas("classify") == 1)
    assert local.unexpected_exits == 1
    assert local.reconcile() == 1
    pids = local.pids("classify")
    assert len(pids) == 2 and pids[0] == first and second not in pids


def test_sigterm_ignoring_worker_is_killed_after_grace(tmp_path):
    act = LocalProcessActuator(lambda stage: STUBBORN, grace_s=0.3, log_dir=tmp_path)
    try:
        act.set_replicas("s", 1)
        (pid,) = act.pids("s")
        log = next(tmp_path.glob("s-*.log"))
        wait_until(lambda: b"armed" in log.read_bytes())  # the SIGTERM handler is installed
        t0 = time.monotonic()
        act.set_replicas("s", 0)
        took = time.monotonic() - t0
        assert not alive(pid) and act.pids("s") == []
        assert 0.3 <= took < 3.0
    finally:
        act.close()


def test_worker_argv_is_the_slipstream_worker_command():
    import sys
    assert worker_argv("p.yaml", "detect") == [sys.executable, "-m", "slipstream.cli", "worker",
                                               "--pipeline", "p.yaml", "--stage", "detect",
                                               "--loglevel", "info"]


def test_dry_run_remembers_counts():
    act = DryRunActuator()
    act.set_replicas("a", 4)
    assert act.replicas("a") == 4 and act.replicas("b") == 0


async def test_supervisor_starts_plan_replaces_crash_and_stops_everything():
    act = LocalProcessActuator(lambda stage: SLEEPER, grace_s=2.0)
    sup = Supervisor(act, {"detect": 2, "classify": 1}, reconcile_s=0.05)
    stop = asyncio.Event()
    seen: dict = {}

    async def tuner(stop_event: asyncio.Event) -> None:
        # what the tuner service does through the same actuator: resize a stage
        pids = await asyncio.to_thread(act.pids, "detect")
        seen["start"] = pids
        os.kill(pids[0], 9)  # a crash the supervisor must repair
        deadline = time.monotonic() + 5
        while not (act.unexpected_exits and len(act.pids("detect")) == 2):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        await asyncio.to_thread(act.set_replicas, "classify", 3)
        seen["all"] = act.pids("detect") + act.pids("classify")
        stop_event.set()

    await asyncio.wait_for(sup.run(stop, tuner), 15)
    assert len(seen["start"]) == 2 and sup.replaced >= 1
    assert len(seen["all"]) == 5
    assert not any(alive(p) for p in seen["all"])
    assert act.pids("detect") == [] and act.pids("classify") == []


@pytest.mark.parametrize("replicas,current,want", [(3, 4, 4), (4, 4, 4), (5, 4, 8), (8, 4, 16), (6, 8, 8),
                                                   (9, 8, 16), (1, 1, 1), (2, 1, 4), (3000, 2048, 4096)])
def test_partitions_grow_only_with_headroom(replicas, current, want):
    assert target_partitions(replicas, current) == want


def test_partitions_never_shrink_and_validate():
    assert target_partitions(1, 64) == 64
    assert target_partitions(5, 4, headroom=1.0) == 8
    with pytest.raises(ValueError):
        target_partitions(3, 0)







def test_crash_loop_restarts_back_off():
    now = [100.0]
    crasher = [sys.executable, "-c", "raise SystemExit(2)"]
    act = LocalProcessActuator(lambda stage: crasher, restart_backoff_s=(1.0, 4.0), clock=lambda: now[0])
    try:
        act.set_replicas("s", 1)
        wait_until(lambda: act.replicas("s") == 0)  # crash 1 at t=100: replaced at once
        assert act.restart_at("s") == 100.0
        assert act.reconcile() == 1
        wait_until(lambda: act.replicas("s") == 0)  # crash 2 at t=100: wait 1 s
        assert act.restart_at("s") == 101.0
        assert act.reconcile() == 0  # too early
        now[0] = 101.0
        assert act.reconcile() == 1
        wait_until(lambda: act.replicas("s") == 0)  # crash 3 at t=101: wait 2 s
        assert act.restart_at("s") == 103.0
        now[0] = 102.9
        assert act.reconcile() == 0
        now[0] = 103.0
        assert act.reconcile() == 1
        wait_until(lambda: act.replicas("s") == 0)  # crash 4: 4 s (the cap)
        assert act.restart_at("s") == 107.0
        now[0] = 200.0  # a quiet minute forgives
        assert act.restart_at("s") == 200.0
        assert act.unexpected_exits == 4
    finally:
        act.close()


def test_workers_get_this_environment_plus_the_given_one(tmp_path, monkeypatch):
    monkeypatch.setenv("SLIPSTREAM_PROCESSING", "exactly-once")  # e.g. a switch set for the whole run
    printer = [sys.executable, "-c", "import os\nprint('env', os.environ.get('SLIPSTREAM_PROCESSING'), "
               "os.environ.get('SLIPSTREAM_BOOTSTRAP'), flush=True)\nimport time\nwhile True: time.sleep(0.05)"]
    act = LocalProcessActuator(lambda stage: printer, grace_s=1.0, log_dir=tmp_path,
                               env={"SLIPSTREAM_BOOTSTRAP": "127.0.0.1:1"})
    try:
        act.set_replicas("s", 1)
        log = next(tmp_path.glob("s-*.log"))
        wait_until(lambda: b"env " in log.read_bytes())
        assert b"env exactly-once 127.0.0.1:1" in log.read_bytes()
    finally:
        act.close()
