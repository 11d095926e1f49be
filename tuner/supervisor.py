"""`slipstream up`: run a pipeline's initial plan as local worker processes and the tuner on top.

The supervisor starts the planned replica count of every stage through a
:class:`~slipstream.tuner.actuators.LocalProcessActuator`, then runs the tuner service (which resizes through the
same actuator) and, every ``reconcile_s``, replaces workers that died on their own. On stop (signal
or a failed tuner) it stops every worker it started: SIGTERM, then SIGKILL after the grace period.
The initial counts come from the caller (the planner's plan; the CLI falls back to the spec defaults).

Besides the workers it can keep *services* alive: control-plane processes (the tuner, the planner
service) given as a role name and a command, one process each, restarted the same way when they exit
on their own (``slipstream chaos`` and ``slipstream soak`` run them so, to kill them on purpose). A
crashed process is replaced at the next reconcile (every ``reconcile_s``, a quarter of a second): at once
for the first crash of a role within a minute, then after the actuator's crash back-off (1 s for the
second, doubling up to 30 s).

Failover: a worker that dies never leaves its consumer group, so the group would keep its partitions
for the session timeout (2 s) before moving them. The supervisor is its parent and sees the exit
within a reconcile period, so with a ``leaver`` (``slipstream.streams.members.GroupLeaver``) it removes the
dead worker's members itself (``LeaveGroup``, the members the worker last reported and no live worker
reports: ``slipstream.streams.members.departed``), and the group rebalances at once. With ``standby`` warm
workers per stage (``local_supervisor``) the stage's other members already hold the model and take the
partitions within about a second; the replacement starts beside them and joins the group once its
own model is warm (``slipstream.streams.app.join_group_when``), becoming the stage's new standby.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Iterable, Mapping, Protocol, Sequence

from ..streams.config import KafkaSettings
from ..streams.members import GroupLeaver, departed, read_members
from ..streams.placement import cores_left
from ..streams.procs import worker_argv
from .actuators import Exit, LocalProcessActuator

log = logging.getLogger(__name__)


class Leaver(Protocol):
    async def leave_all(self, members: Mapping[str, Iterable[str]]) -> dict[tuple[str, str], str]:
        """Remove each (group, member id) from its group; the answer per member, never raises."""

    async def close(self) -> None: ...


class Supervisor:
    def __init__(self, actuator: LocalProcessActuator, initial: Mapping[str, int], *,
                 reconcile_s: float = 0.25, leaver: Leaver | None = None) -> None:
        bad = {k: v for k, v in initial.items() if v < 0}
        if bad:
            raise ValueError(f"initial replicas must be >= 0: {bad}")
        self.actuator = actuator
        self.initial = dict(initial)
        self.reconcile_s = reconcile_s
        self.leaver = leaver
        self.replaced = 0
        self.removed: list[tuple[str, str, str]] = []  # (group, member id, answer) of every LeaveGroup sent
        self._removals: set[asyncio.Task] = set()

    def start(self) -> None:
        """Start the initial workers (oldest first per stage)."""
        for stage, n in self.initial.items():
            self.actuator.set_replicas(stage, n)
            log.info("stage %s: %d worker(s) pids=%s", stage, n, self.actuator.pids(stage))

    async def run(self, stop: asyncio.Event,
                  tuner: Callable[[asyncio.Event], Awaitable[None]] | None = None) -> None:
        """Start, then keep workers alive while ``tuner(stop)`` runs, until ``stop`` is set or the
        tuner returns/fails; always stops the workers it started."""
        self.start()
        task = asyncio.create_task(tuner(stop)) if tuner is not None else None
        try:
            while not stop.is_set():
                if task is not None and task.done():
                    task.result()  # a tuner that failed takes the supervisor down with it
                    break
                exits = await asyncio.to_thread(self.actuator.take_exits)
                if exits and self.leaver is not None:  # in the background: a restart must not wait for it
                    removal = asyncio.create_task(self.remove_members(exits))
                    self._removals.add(removal)
                    removal.add_done_callback(self._removals.discard)
                started = await asyncio.to_thread(self.actuator.reconcile)
                if started:
                    self.replaced += started
                    log.warning("replaced %d exited worker(s)", started)
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self.reconcile_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            stop.set()
            for t in [task, *self._removals]:
                if t is not None and not t.done():
                    t.cancel()
                    try:
                        await t
                    except asyncio.CancelledError:
                        pass
            await asyncio.to_thread(self.actuator.close)
            if self.leaver is not None:
                await self.leaver.close()

    async def remove_members(self, exits: Sequence[Exit]) -> None:
        """Remove from their groups the members of the workers that exited (``slipstream.streams.members``)."""
        def gone() -> dict[str, tuple[str, ...]]:
            alive = [read_members(p) for p in self.actuator.members()]
            out: dict[str, list[str]] = {}
            for ex in exits:
                for group, ids in departed(read_members(ex.member_file), alive).items():
                    out.setdefault(group, []).extend(ids)
            return {g: tuple(ids) for g, ids in out.items()}

        members = await asyncio.to_thread(gone)
        if not members:
            return
        answers = await self.leaver.leave_all(members)
        self.removed += [(g, m, a) for (g, m), a in answers.items()]
        log.warning("removed the members of exited worker(s) %s from their groups: %s",
                    [f"{ex.stage} pid={ex.pid}" for ex in exits], {f"{g} {m}": a for (g, m), a in answers.items()})


@dataclass(frozen=True)
class LocalCapacity:
    """What this host gives model threads: its cores less ``reserve_cores`` for the broker, the load
    generator and the control plane. A stage never runs more replicas than that (more would add
    contention, not capacity), and one worker process holds them all (no rebalance to scale)."""

    reserve_cores: float = 0.5

    @property
    def max_replicas(self) -> int:
        return cores_left(self.reserve_cores)


def local_supervisor(pipe, pipeline_file: str, replicas: Mapping[str, int], capacity: LocalCapacity, *,
                     log_dir: Path | None, env: Mapping[str, str] | None = None,
                     loglevel: str = "info", profiles: str | None = None,
                     services: Mapping[str, Sequence[str]] | None = None, standby: int = 0,
                     kafka: KafkaSettings | None = None) -> Supervisor:
    """The supervisor of ``slipstream up`` and the live runs: the pipeline's worker roles as local
    processes holding ``capacity.max_replicas`` replicas each (predictors seeded from ``profiles``),
    ``standby`` warm worker processes more per worker role (the stages and the join), and one process
    per ``services`` entry (role -> command). With ``kafka``, the members of a worker that dies are
    removed from their groups at once (``LeaveGroup``), not after the session timeout."""
    if standby < 0:
        raise ValueError(f"standby workers must be >= 0, got {standby}")
    cap = capacity.max_replicas
    services = dict(services or {})
    clash = set(services) & set(pipe.worker_roles(replicas))
    if clash:
        raise ValueError(f"service names clash with worker roles: {sorted(clash)}")

    def argv_for(role: str) -> Sequence[str]:
        return services[role] if role in services else worker_argv(pipeline_file, role, loglevel, cap, profiles)

    roles = pipe.worker_roles(replicas)
    actuator = LocalProcessActuator(argv_for, log_dir=log_dir, env=env, replicas_per_worker=cap, max_replicas=cap,
                                    standby={role: standby for role in roles})
    return Supervisor(actuator, {**roles, **{role: 1 for role in services}},
                      leaver=GroupLeaver(kafka) if kafka is not None else None)
