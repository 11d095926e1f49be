"""Result collection for one replay run: which requests were sent, which answered, nothing counted twice.

The results topic is shared by every run of a pipeline and delivery is at-least-once, so the collector
keeps the first result of each request id it sent, counts duplicates (and duplicates that disagree,
which would break "nothing lost, nothing doubled"), and ignores other runs' results.
It is a plain state holder fed with :class:`~slipstream.schemas.records.InferenceResult` records; the
Kafka loop around it only decodes them (``codec.decode_typed``) and calls :meth:`Collector.offer`.

:func:`check_exactly_once` is the after-the-fact check the tests run on every result record read
back from a topic: missing, duplicate, conflicting and unexpected results, each by request id.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ..schemas.records import InferenceResult

NEW, DUPLICATE, FOREIGN = "new", "duplicate", "foreign"


@dataclass
class Collector:
    run_id: str
    sent: set[str] = field(default_factory=set)
    results: dict[str, InferenceResult] = field(default_factory=dict)
    duplicates: int = 0
    conflicting_duplicates: int = 0  # a second result whose status differs from the first
    early: int = 0  # results seen before their send was recorded (the send callback races the consumer)
    foreign: int = 0
    sending_done: bool = False
    _answered: int = 0  # sent requests that have a result

    def expect(self, request_id: str) -> None:
        """Record that ``request_id`` was produced."""
        if request_id in self.sent:
            return
        self.sent.add(request_id)
        if request_id in self.results:
            self._answered += 1

    def offer(self, result: InferenceResult) -> str:
        """Take one decoded result; returns NEW, DUPLICATE or FOREIGN (another run's request)."""
        rid = result.request_id
        if not rid.startswith(self.run_id + "-"):
            self.foreign += 1
            return FOREIGN
        first = self.results.get(rid)
        if first is not None:
            self.duplicates += 1
            if first.status != result.status:
                self.conflicting_duplicates += 1
            return DUPLICATE
        if rid in self.sent:
            self._answered += 1
        else:
            self.early += 1
        self.results[rid] = result
        return NEW

    def finish_sending(self) -> None:
        self.sending_done = True

    @property
    def outstanding(self) -> int:
        return len(self.sent) - self._answered

    @property
    def complete(self) -> bool:
        """Every sent request has a result and nothing more will be sent."""
        return self.sending_done and self.outstanding == 0

    def missing(self) -> list[str]:
        return sorted(rid for rid in self.sent if rid not in self.results)

    def collected(self) -> list[InferenceResult]:
        """The first result of every request of this run, in request-id (= schedule) order."""
        return [self.results[rid] for rid in sorted(self.results)]


@dataclass(frozen=True)
class Delivery:
    """What a set of results says about "exactly one result per request, nothing lost"."""

    sent: int
    missing: tuple[str, ...]  # sent, but no result
    duplicates: tuple[str, ...]  # one entry per result beyond a request's first
    conflicting: tuple[str, ...]  # requests whose results disagree on status
    unexpected: tuple[str, ...]  # results of requests that were not sent

    @property
    def exactly_once(self) -> bool:
        return not (self.missing or self.duplicates or self.conflicting or self.unexpected)

    def __str__(self) -> str:
        def few(ids: tuple[str, ...]) -> str:
            return ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")
        return (f"{self.sent} sent: {len(self.missing)} missing [{few(self.missing)}], {len(self.duplicates)} "
                f"duplicate [{few(self.duplicates)}], {len(self.conflicting)} conflicting "
                f"[{few(self.conflicting)}], {len(self.unexpected)} unexpected [{few(self.unexpected)}]")


def check_exactly_once(results: Iterable[InferenceResult], sent: Iterable[str]) -> Delivery:
    """Check every result record read back (duplicates included) against the request ids sent."""
    sent = set(sent)
    first: dict[str, str] = {}  # request id -> status of its first result
    duplicates, conflicting, unexpected = [], set(), []
    for r in results:
        rid, status = r.request_id, r.status
        if rid not in sent:
            unexpected.append(rid)
        elif rid in first:
            duplicates.append(rid)
            if first[rid] != status:
                conflicting.add(rid)
        else:
            first[rid] = status
    return Delivery(len(sent), tuple(sorted(sent - first.keys())), tuple(sorted(duplicates)),
                    tuple(sorted(conflicting)), tuple(sorted(unexpected)))
