"""Failover of local workers: warm standby processes per role, and the supervisor removing a dead
worker's consumer-group members (LeaveGroup) instead of waiting for the session timeout."""
from __future__ import annotations

import asyncio
import os
import sys
import time

from test_actuators import wait_until

from slipstream.streams.config import MEMBER_FILE_ENV
from slipstream.streams.members import read_members, write_members
from slipstream.tuner.actuators import LocalProcessActuator
from slipstream.tuner.supervisor import Supervisor

# writes {"g-<role>": "m-<pid>"} to the file its parent names, as a worker does after joining its group
MEMBER = [sys.executable, "-c",
          "import json, os, sys, time\n"
          f"path = os.environ['{MEMBER_FILE_ENV}']\n"
          "json.dump({'g-' + sys.argv[1]: f'm-{os.getpid()}'}, open(path, 'w'))\n"
          "while True: time.sleep(0.05)"]


def member_argv(role: str) -> list[str]:
    return MEMBER + [role]


class FakeLeaver:
    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.closed = False

    async def leave_all(self, members):
        self.calls.append({g: tuple(ms) for g, ms in members.items()})
        return {(g, m): "NoError" for g, ms in members.items() for m in ms}

    async def close(self) -> None:
        self.closed = True


def test_standby_workers_run_beside_the_replicas_and_none_at_zero():
    act = LocalProcessActuator(member_argv, grace_s=2.0, replicas_per_worker=2, standby={"detect": 1})
    try:
        act.set_replicas("detect", 1)
        assert len(act.pids("detect")) == 2 and act.desired("detect") == 2
        assert act.replicas("detect") == 1  # the standby is not a replica the tuner counts
        act.set_replicas("detect", 3)  # 2 workers of 2 replicas, and the standby
        assert len(act.pids("detect")) == 3
        act.set_replicas("classify", 1)  # no standby asked for this role
        assert len(act.pids("classify")) == 1
        act.set_replicas("detect", 0)  # a stage at 0 replicas keeps no standby either
        assert act.pids("detect") == []
    finally:
        act.close()


def test_each_worker_gets_a_member_file_of_its_own(tmp_path):
    act = LocalProcessActuator(member_argv, grace_s=2.0, member_dir=tmp_path, standby={"detect": 1})
    try:
        act.set_replicas("detect", 1)
        files = act.members("detect")
        assert len(files) == 2 and len(set(files)) == 2
        wait_until(lambda: all(read_members(f) for f in files))
        pids = act.pids("detect")
        assert sorted(read_members(f)["g-detect"] for f in files) == sorted(f"m-{p}" for p in pids)
    finally:
        act.close()


async def test_supervisor_removes_the_dead_workers_members_and_keeps_the_survivors():
    act = LocalProcessActuator(member_argv, grace_s=2.0, replicas_per_worker=2, standby={"detect": 1})
    leaver = FakeLeaver()
    sup = Supervisor(act, {"detect": 1}, reconcile_s=0.05, leaver=leaver)
    stop = asyncio.Event()
    seen: dict = {}

    async def fault(stop_event: asyncio.Event) -> None:
        files = act.members("detect")
        while not all(read_members(f) for f in files):
            await asyncio.sleep(0.02)
        victim, survivor = act.pids("detect")
        seen["victim"], seen["survivor"] = victim, survivor
        os.kill(victim, 9)
        deadline = time.monotonic() + 5
        while not leaver.calls:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        while len(act.pids("detect")) < 2:  # replaced: the new process is the standby now
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # a few reconciles after the removal: still supervising
        assert not stop_event.is_set()
        seen["after"] = act.pids("detect")
        stop_event.set()

    await asyncio.wait_for(sup.run(stop, fault), 15)
    assert leaver.calls == [{"g-detect": (f"m-{seen['victim']}",)}]
    assert sup.removed == [("g-detect", f"m-{seen['victim']}", "NoError")]
    assert seen["after"][0] == seen["survivor"] and seen["victim"] not in seen["after"]
    assert leaver.closed


async def test_no_removal_for_a_member_a_live_worker_reports(tmp_path):
    # the dead worker's file names the survivor's member (a stale copy): nothing is removed
    act = LocalProcessActuator(member_argv, grace_s=2.0, member_dir=tmp_path, standby={"s": 1})
    leaver = FakeLeaver()
    sup = Supervisor(act, {"s": 1}, reconcile_s=0.05, leaver=leaver)
    stop = asyncio.Event()

    async def fault(stop_event: asyncio.Event) -> None:
        files = act.members("s")
        while not all(read_members(f) for f in files):
            await asyncio.sleep(0.02)
        victim = act.pids("s")[1]
        os.kill(victim, 19)  # SIGSTOP: it must not rewrite its file
        write_members(files[1], read_members(files[0]))
        os.kill(victim, 9)
        deadline = time.monotonic() + 5
        while act.unexpected_exits == 0 or len(act.pids("s")) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # a removal would have run by now
        stop_event.set()

    await asyncio.wait_for(sup.run(stop, fault), 15)
    assert leaver.calls == [] and sup.removed == []
