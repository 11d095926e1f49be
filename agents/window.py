"""The window planner: a stage worker's decisions, pure, with the clock passed in (``now_ns``).

``slipstream.agents.worker`` (the faust shell, its parts in ``slipstream.agents.stage``) reads records, runs models and
talks to Kafka; everything it *decides* is here, so it is tested without a broker, an event loop or a real clock:

- :class:`WindowPlanner` holds the worker's FIFO queue and says when to take a window and which items
  (:meth:`WindowPlanner.poll`), through ``slipstream.streams.batching`` (``ready``, ``flush_due_ns``,
  ``window_size``): the same code the estimator (``slipstream.planner.sim``) runs, not a copy of it;
- :func:`split_variants` sends each item of a window to a variant (Loki routing, INFaaS accuracy floor)
  or to an ``accuracy-floor`` drop;
- :func:`sub_batch` is one step of working a variant's items off: ``slipstream.streams.batching.decide`` at
  ``now_ns``, with the drop reasons;
- :func:`batch_outputs` turns a batch's model outputs into the records to produce (``slipstream.agents.routing``),
  one list per input item.

A window's records are produced together and its input offsets acked together, after delivery
(``slipstream.agents.stage.commit.Commits.finish``: the one place that becomes a Kafka transaction with exactly-once).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping, NamedTuple, Sequence

from ..schemas.records import InferenceRequest, StageConfig
from ..streams import batching, shares
from ..streams.spec import Pipeline
from . import routing
from .control import choose_variant


@dataclass(slots=True)
class Item:
    """One decoded request in the worker's queue."""

    record: Any  # the Kafka record it was read from (``.topic``, ``.partition``, ``.offset``, ``.value``)
    req: InferenceRequest
    arrival_ns: int  # when the worker took it from Kafka (the hop's ``received_ns``)
    tp: Hashable
    offset: int


class Take(NamedTuple):
    items: list  # the window, FIFO


class Wait(NamedTuple):
    until_ns: int | None  # None: until something changes (an arrival, a free replica, a config)


class WindowPlanner:
    """The FIFO queue of one worker and the rule for taking windows off it."""

    def __init__(self) -> None:
        self.queue: deque[Item] = deque()

    def __len__(self) -> int:
        return len(self.queue)

    def add(self, items: Iterable[Item]) -> None:
        self.queue.extend(items)

    def poll(self, now_ns: int, s: batching.BatchSettings, free_replica: bool) -> Take | Wait:
        """Take a window now, or wait (until the oldest item's batch timeout, or for a change)."""
        if not free_replica or not self.queue:
            return Wait(None)
        oldest = self.queue[0].arrival_ns
        if not batching.ready(len(self.queue), oldest, now_ns, s):
            return Wait(batching.flush_due_ns(oldest, s))
        n = batching.window_size(len(self.queue), s)
        return Take([self.queue.popleft() for _ in range(n)])

    def forget(self, tps: set) -> int:
        """Drop the queued items of revoked partitions (Kafka redelivers them to their new owner)."""
        before = len(self.queue)
        self.queue = deque(i for i in self.queue if i.tp not in tps)
        return before - len(self.queue)


def split_variants(window: Sequence[Item], cfg: StageConfig, accuracy: Mapping[str, float]
                   ) -> tuple[dict[str, list[Item]], list[tuple[Item, str]]]:
    """(items per variant, FIFO; items no variant in service may serve, with the reason)."""
    groups: dict[str, list[Item]] = {}
    dropped: list[tuple[Item, str]] = []
    in_use = shares.in_service(cfg.routing, cfg.variant)
    if window and len(in_use) == 1 and all(it.req.accuracy_floor is None for it in window):
        return {next(iter(in_use)): list(window)}, []  # the common case: no choice to make per item
    for it in window:
        variant, why = choose_variant(it.req.request_id, it.req.accuracy_floor, cfg, accuracy)
        if variant is None:
            dropped.append((it, why))
        else:
            groups.setdefault(variant, []).append(it)
    return groups, dropped


class SubBatch(NamedTuple):
    run: list  # items to run now
    dropped: list  # (item, reason): cannot meet their deadline even alone
    deferred: list  # items decided again after ``run``


def sub_batch(pending: Sequence[Item], now_ns: int, predict_ns: Callable[[int], int],
              s: batching.BatchSettings) -> SubBatch:
    """One step of working a variant's items off at ``now_ns`` (``slipstream.streams.batching.decide``)."""
    d = batching.decide([it.req.deadline_ns for it in pending], now_ns, predict_ns, s)
    alone = predict_ns(1) if d.drop else 0
    return SubBatch([pending[i] for i in d.run],
                    [(pending[i], batching.drop_reason(pending[i].req.deadline_ns, now_ns, alone))
                     for i in d.drop],
                    [pending[i] for i in d.defer])


def batch_outputs(pipe: Pipeline, stage: str, variant: str, accuracy: float, batch: Sequence[Item],
                  outs: Sequence | None, error: str | None, started_ns: int, finished_ns: int,
                  worker: str, model_digest: str = "") -> list[list[routing.Out]]:
    """The records each item of a batch ends in: its outputs routed on, or an error result (the
    model failed: ``error``; or routing refused an output). ``outs`` is None when ``error`` is set;
    ``model_digest`` (the executor's) goes into each item's hop."""
    records = []
    children = routing.child_stages(pipe, stage)
    for k, it in enumerate(batch):
        h = routing.hop(stage, variant, len(batch), routing.enqueued_ns(it.req), started_ns, finished_ns,
                        worker, it.arrival_ns, model_digest)
        if error is not None:
            records.append([routing.ended(pipe, it.req, "error", error, finished_ns, h)])
            continue
        try:
            records.append(routing.forward(pipe, stage, it.req, outs[k], h, accuracy, children))
        except ValueError as exc:
            records.append([routing.ended(pipe, it.req, "error", str(exc), finished_ns, h)])
    return records


def failed(pipe: Pipeline, stage: str, it: Item, reason: str, now_ns: int) -> list[routing.Out]:
    """An item's answer when its processing failed: an error result, or, when even that cannot be
    built from its request, a dead letter of its input record. Never raises."""
    try:
        return [routing.ended(pipe, it.req, "error", reason[:2000], now_ns)]
    except Exception as exc:  # noqa: BLE001 - the last answer there is
        m = it.record
        return [routing.dead_letter(pipe, stage, m.value, m.topic, m.partition, m.offset,
                                    f"{reason[:1000]}; no error result: {exc!r}"[:2000], now_ns)]
