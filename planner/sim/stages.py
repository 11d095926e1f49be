"""A stage of the pipeline: its items go to its replica group, its outputs to its children.

- :meth:`Stage.receive`: items produced to the stage's topic go to its one replica group (a mixed
  stage's too: deployed, it is one pool, ``slipstream.planner.sim.world.build``).
- :meth:`Stage.done`: a finished batch. Each item goes on along every child edge with the edge's
  probability, as k child items where k has mean ``fanout`` (``round``: floor + Bernoulli(fraction),
  or ``poisson``; drawn from the stage's fan-out generator), each produced at the batch's end and fetchable
  one ``between`` transit later. An item with no children (a sink, or k = 0 on every edge) ends its
  fragment here; one with k > 1 has split its request, which then ends at the join
  (``slipstream.planner.sim.record``).

Each stage has a generator of its own for fan-out, drawn in the order of its batch completions, an
order that does not depend on how the stages' events interleave, so the event loop and
``slipstream.planner.sim.stagewise`` draw the same numbers.

A stage with an ``inbox`` (a list; ``stagewise`` runs) collects what is produced to it instead of
putting it in its group's queues at once.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .groups import InWorkerGroup, PartitionGroup
    from .world import World


class Stage:
    __slots__ = ("index", "name", "world", "fanout_rng", "group", "kids", "chain", "inbox")

    def __init__(self, index: int, name: str, world: "World") -> None:
        self.index = index
        self.name = name
        self.world = world
        # the first stream drew a routing among replica groups before a mixed stage became one pool;
        # still spawned so every later stream keeps its seed
        _, self.fanout_rng = world.stream(), world.stream()
        self.group: InWorkerGroup | PartitionGroup | None = None  # set by ``world.build``
        self.kids: list[tuple[Stage, float, float]] = []  # (child, fanout, probability)
        self.chain: Stage | None = None  # the only child, when its edge is fanout 1, probability 1
        self.inbox: list | None = None

    def add_child(self, child: "Stage", fanout: float, probability: float) -> None:
        self.kids.append((child, fanout, probability))
        plain = len(self.kids) == 1 and fanout == 1.0 and probability == 1.0
        self.chain = child if plain else None

    def receive(self, now: int, vis: list[int], reqs: list[int], sent: list[int], src: int) -> None:
        if self.inbox is not None:
            self.inbox.append((src, vis, reqs, sent))
            return
        self.group.put(now, vis, reqs, sent)

    def fanout_counts(self, fanout: float, prob: float, m: int) -> list[int]:
        """Children of each of ``m`` items along one edge."""
        rng = self.fanout_rng
        if self.world.fanout_dist == "poisson":
            k = rng.poisson(fanout, m)
        else:
            base = math.floor(fanout)
            k = base + (rng.random(m) < fanout - base)
        if prob < 1.0:
            k = k * (rng.random(m) < prob)
        return k.tolist()

    def done(self, br: list[int], bs: list[int], now: int) -> None:
        log = self.world.log
        log.visit(self.index, now, br, bs)
        if self.chain is not None:
            self.send(self.chain, br, now)
            return
        if not self.kids:
            log.ends(now, br)
            return
        total = [0] * len(br)
        for child, fanout, prob in self.kids:
            if fanout == 1.0 and prob == 1.0:
                self.send(child, br, now)
                total = [x + 1 for x in total]
                continue
            k = self.fanout_counts(fanout, prob, len(br))
            self.send(child, [r for r, c in zip(br, k) for _ in range(c)], now)
            total = [x + y for x, y in zip(total, k)]
        ended = [r for r, k in zip(br, total) if k == 0]
        if ended:
            log.ends(now, ended)
        log.split.extend(r for r, k in zip(br, total) if k > 1)

    def send(self, child: "Stage", reqs: list[int], now: int) -> None:
        if reqs:
            vis, reqs = self.world.hop(now, reqs)
            child.receive(now, vis, reqs, [now] * len(reqs), self.index)
