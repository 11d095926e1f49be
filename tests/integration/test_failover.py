"""Failover to a warm standby: the local supervisor runs a stage with one standby worker (two members
of the stage's group, each with its share of the partitions), a worker is killed with SIGKILL, and
the supervisor removes the dead member from the group (LeaveGroup). The survivor must take every
partition and answer every request (exactly once with exactly-once processing; at least once
otherwise: the killed worker's last uncommitted window may be answered again); the replacement, once
started, joins as the stage's new standby.

The workers' session timeout is long here (``SESSION_S``), so the dead member's session still holds its
partitions when the supervisor removes it: the coordinator answers ``NoError`` only for a member it
still has. The replacement is held back (``HELD``) until the survivor has taken over, so the takeover
is the survivor's and not a side effect of the replacement's join. How fast all this is belongs to
``slipstream chaos --case worker`` (docs/results.md), not to this test."""
from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from slipstream.streams import admin, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.members import GroupLeaver
from slipstream.streams.procs import worker_argv
from slipstream.streams.spec import load_pipeline
from slipstream.tuner.actuators import LocalProcessActuator
from slipstream.tuner.supervisor import Supervisor

from slipstream.loadgen.collect import check_exactly_once

from .helpers import as_records, assert_exactly_once, read_topic
from .workers import unique_pipeline

FANOUT3 = Path(__file__).parent / "pipelines" / "fanout3.yaml"
SESSION_S = "30"  # longer than a takeover by LeaveGroup takes, even on a loaded machine
READY = re.compile(rb"slipstream-worker ready stage=pre partitions=(\d+)")
# the replacement waits for this file before it becomes a worker (the test's hold on it)
HELD = [sys.executable, "-c", "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
        "os.execv(sys.argv[2], sys.argv[2:])"]


def one_stage(tmp_path: Path, name: str) -> Path:
    """fanout3's first stage alone (a no-op model, 2 partitions): its outputs are the results."""
    import yaml

    path = unique_pipeline(FANOUT3, name, tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["stages"], doc["edges"] = doc["stages"][:1], []
    path.write_text(yaml.safe_dump(doc))
    return path


class Stage:
    """The supervisor of one stage (standby 1) on a thread with its own event loop."""

    def __init__(self, path: Path, kafka, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir, self.release = log_dir, log_dir / "release"
        worker = worker_argv(str(path), "pre", "info")
        self.argv_calls = 0

        def argv_for(role: str) -> list[str]:
            self.argv_calls += 1
            return worker if self.argv_calls <= 2 else HELD + [str(self.release), *worker]

        self.actuator = LocalProcessActuator(argv_for, log_dir=log_dir, env=env, grace_s=10.0, standby={"pre": 1})
        self.supervisor = Supervisor(self.actuator, {"pre": 1}, reconcile_s=0.1, leaver=GroupLeaver(kafka))
        started = threading.Event()

        def main() -> None:
            self.loop = asyncio.new_event_loop()
            self.stop_event = asyncio.Event()
            started.set()
            self.loop.run_until_complete(self.supervisor.run(self.stop_event))
            self.loop.close()

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()
        started.wait()

    def log(self, pid: int) -> Path:
        return self.log_dir / f"pre-{self.actuator.started.index(('pre', pid)) + 1}.log"

    def partitions(self, pid: int) -> list[int]:
        """The partition counts of every ready line of worker ``pid`` so far."""
        path = self.log(pid)
        return [int(m.group(1)) for m in READY.finditer(path.read_bytes())] if path.exists() else []

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(60)


async def until(pred, what: str, timeout_s: float = 120.0) -> None:
    """Wait for an event (``pred`` true); the timeout only keeps a broken run from hanging."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.1)


async def send(client: PipelineClient, pipe, n: int, ids: list[str]) -> None:
    futs = []
    for i in range(n):
        req = make_request(pipe, f"p-{len(ids)}".encode())
        ids.append(req.request_id)
        futs.append(await client.send(req, wait=False))
        await asyncio.sleep(0.02)
    await asyncio.gather(*futs)


@pytest.mark.parametrize("processing", ["at-least-once", "exactly-once"])
async def test_a_killed_workers_partitions_go_to_the_warm_standby_and_nothing_is_lost(kafka, unique, tmp_path,
                                                                                      processing):
    path = one_stage(tmp_path, unique)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    env = {"SLIPSTREAM_BOOTSTRAP": kafka.bootstrap, "SLIPSTREAM_SESSION_TIMEOUT_S": SESSION_S,
           "SLIPSTREAM_PROCESSING": processing, "PYTHONUNBUFFERED": "1"}
    stage = await asyncio.to_thread(Stage, path, kafka, tmp_path / "logs", env)
    try:
        # both workers warm and members, one partition each
        await until(lambda: len(stage.actuator.pids("pre")) == 2
                    and all(stage.partitions(p)[-1:] == [1] for p in stage.actuator.pids("pre")),
                    "two ready workers with a partition each")
        victim, survivor = stage.actuator.pids("pre")
        ids: list[str] = []
        async with PipelineClient(pipe, kafka) as client:
            await send(client, pipe, 20, ids)  # before the kill: both partitions served
            os.killpg(victim, signal.SIGKILL)
            await send(client, pipe, 40, ids)  # while the survivor takes over
            await until(lambda: stage.partitions(survivor)[-1:] == [2], "the survivor holding both partitions")
            await send(client, pipe, 20, ids)
            for rid in ids:  # every request answered, the replacement still held back
                await client.result(rid, 60)
            # the survivor took them because the supervisor removed the dead member, which the
            # coordinator still had (its session was open): not because the session timed out
            assert [(g, a) for g, _, a in stage.supervisor.removed] == [(topics.consumer_group(pipe.name, "pre"),
                                                                         "NoError")], stage.supervisor.removed
            assert len(stage.actuator.pids("pre")) == 2  # the replacement is started, not yet a worker
            assert all(stage.partitions(p) == [] for p in stage.actuator.pids("pre") if p != survivor)
            # released, it joins the group once warm and becomes the stage's new standby
            stage.release.touch()
            replacement = next(p for p in stage.actuator.pids("pre") if p != survivor)
            await until(lambda: stage.partitions(replacement)[-1:] == [1], "the replacement serving a partition")
            await send(client, pipe, 20, ids)
            for rid in ids[-20:]:
                await client.result(rid, 60)
        if processing == "exactly-once":
            await assert_exactly_once(kafka, pipe.name, ids)
        else:  # the killed worker's last outputs may come again (not yet committed): never a request lost
            raw = await read_topic(kafka, topics.results(pipe.name), min_count=len(ids), short_ok=True)
            delivery = check_exactly_once(as_records(raw), ids)
            assert not delivery.missing and not delivery.conflicting and not delivery.unexpected, str(delivery)
        assert stage.actuator.unexpected_exits == 1
    finally:
        await asyncio.to_thread(stage.stop)
        await admin.delete_topics(kafka, [t.name for t in topics.all_topics(pipe)])
