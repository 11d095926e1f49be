"""A worker's consumer-group members, told to the process that started it, and the ``LeaveGroup`` that
removes a dead worker's members at once.

A worker killed with SIGKILL never leaves its group: the coordinator keeps its partitions assigned to
it until the session timeout (``slipstream.streams.config``, 2 s) has passed without a heartbeat, and only
then starts the rebalance that moves them. Its parent (the local supervisor, ``slipstream.tuner.supervisor``)
sees the exit within a reconcile period, so it does what the worker could not: in the classic group
protocol any client may send ``LeaveGroup`` (API key 13, v0/v1: group and member id) for a member,
and the coordinator removes that member and starts the rebalance at once.

- The worker writes its members, ``{group: member id}``, to the file its parent names in
  ``slipstream.streams.config.MEMBER_FILE_ENV`` (:func:`write_members`, atomically), after every rebalance: the coordinator
  may give a member a new id when it rejoins.
- On the worker's exit the parent reads it (:func:`read_members`), keeps the members no live worker
  reports as its own (:func:`departed`, pure), and sends one ``LeaveGroup`` per member
  (:class:`GroupLeaver`). A member that already left (a clean stop, or the session timeout came
  first) answers ``UNKNOWN_MEMBER_ID``: nothing to do.

Removing a member that is really gone is what the session timeout would do 2 s later; its
partitions go to the group's live members, which read them from the committed offsets. Exactly-once
needs nothing more: the new owner of a partition starts its transactional producer, which fences the
dead one's (``slipstream.agents.transactions``).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Iterable, Mapping

from .config import KafkaSettings

log = logging.getLogger(__name__)

LEAVE_TIMEOUT_S = 5.0  # one LeaveGroup, coordinator lookup included
UNKNOWN_MEMBER = ""  # aiokafka's member id before the first join


def write_members(path: str | Path, members: Mapping[str, str]) -> None:
    """Replace ``path`` with ``members`` ({group: member id}) as JSON, atomically (a reader never
    sees half a file). Members without an id yet are left out."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({g: m for g, m in sorted(members.items()) if m != UNKNOWN_MEMBER}))
    os.replace(tmp, path)


def read_members(path: str | Path | None) -> dict[str, str]:
    """The members a worker wrote to ``path``; {} when there is no file (a worker that never joined)
    or it is not a JSON object of strings."""
    if path is None:
        return {}
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {g: m for g, m in doc.items() if isinstance(g, str) and isinstance(m, str) and m != UNKNOWN_MEMBER}


def departed(dead: Mapping[str, str], alive: Iterable[Mapping[str, str]]) -> dict[str, tuple[str, ...]]:
    """The members to remove for a worker that exited: ``dead`` (its last report, {group: member id})
    less any member a live worker reports (``alive``: theirs). A member id is the coordinator's and
    unique in its group, so a clash only comes from a stale or copied file, and removing a live
    member would cost its group a rebalance for nothing. Returns {group: member ids}, sorted."""
    live = {(g, m) for members in alive for g, m in members.items()}
    out: dict[str, list[str]] = {}
    for group, member in dead.items():
        if member != UNKNOWN_MEMBER and (group, member) not in live:
            out.setdefault(group, []).append(member)
    return {g: tuple(sorted(ms)) for g, ms in sorted(out.items())}


class GroupLeaver:
    """Sends ``LeaveGroup`` for members of other processes. One client, started once and kept
    (a removal should not wait for a connection), its group coordinators looked up once per group and
    again after an answer says the coordinator moved."""

    def __init__(self, settings: KafkaSettings, timeout_s: float = LEAVE_TIMEOUT_S) -> None:
        self.settings, self.timeout_s = settings, timeout_s
        self._client = None
        self._coordinators: dict[str, int] = {}

    async def start(self) -> None:
        from aiokafka.client import AIOKafkaClient

        if self._client is None:
            client = AIOKafkaClient(**self.settings.aiokafka_kwargs(), request_timeout_ms=int(self.timeout_s * 1000))
            await client.bootstrap()
            self._client = client

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def leave(self, group: str, member_id: str) -> str:
        """Remove ``member_id`` from ``group``; returns the answer's error name ("NoError": removed,
        "UnknownMemberIdError": it was not a member any more). Raises on a broker that does not answer
        within the timeout (the session timeout still removes the member)."""
        from aiokafka.errors import for_code

        async with asyncio.timeout(self.timeout_s):
            await self.start()
            for attempt in (1, 2):
                node = await self._coordinator(group, fresh=attempt > 1)
                resp = await self._client.send(node, _leave_request(group, member_id))
                error = for_code(resp.error_code) if resp.error_code else None
                if error is None:
                    return "NoError"
                if error.__name__ not in ("NotCoordinatorError", "CoordinatorNotAvailableError") or attempt > 1:
                    return error.__name__
                self._coordinators.pop(group, None)
        raise AssertionError("unreachable")

    async def leave_all(self, members: Mapping[str, Iterable[str]]) -> dict[tuple[str, str], str]:
        """:meth:`leave` for every (group, member id) of ``members``, concurrently; a failure is
        logged and reported as its exception's name, never raised."""
        pairs = [(g, m) for g, ms in members.items() for m in ms]
        answers = await asyncio.gather(*(self.leave(g, m) for g, m in pairs), return_exceptions=True)
        out = {}
        for (g, m), a in zip(pairs, answers):
            if isinstance(a, BaseException):
                log.warning("LeaveGroup %s member %s not sent: %r (the session timeout removes it)", g, m, a)
                a = type(a).__name__
            out[(g, m)] = a
        return out

    async def _coordinator(self, group: str, fresh: bool = False) -> int:
        from aiokafka.client import CoordinationType

        if fresh or group not in self._coordinators:
            self._coordinators[group] = await self._client.coordinator_lookup(CoordinationType.GROUP, group)
        return self._coordinators[group]


def _leave_request(group: str, member_id: str):
    from aiokafka.protocol.group import LeaveGroupRequest

    return LeaveGroupRequest(group, member_id)
