"""Which variant of a mixed (Loki-style) stage serves a request: one rule, run by the stage workers
(``slipstream.agents.control.choose_variant``) and by the estimator (``slipstream.planner.sim``), so they agree item by item.

A stage's config routes shares of its items to variants (``StageConfig.routing``, variant -> weight).
:func:`in_service` says which variants that means; :func:`choose` picks one for a request id: a
point in ``[0, total share)`` from the CRC-32 of the id, and the variant whose slice of the
cumulative shares (variants in name order) holds it. Deterministic in the id, so a redelivered
request takes the same variant, and every stage sends a request (and its fan-out children, which
keep its id) to the same slice.
"""
from __future__ import annotations

import zlib
from typing import Mapping


def in_service(routing: Mapping[str, float], variant: str) -> dict[str, float]:
    """The variants a config routes to and their shares: ``routing``'s positive ones, else ``variant``
    (the config's primary) alone."""
    return {v: w for v, w in routing.items() if w > 0} or {variant: 1.0}


def named(routing: Mapping[str, float], variant: str) -> tuple[str, ...]:
    """Every variant a config names, sorted: the executors its workers keep loaded. Those it routes to
    and those ``routing`` names with share 0 (a loki stage's ladder: loaded, serving nothing, so a
    later config that only moves shares loads no model); ``variant`` alone when ``routing`` is empty."""
    return tuple(sorted(routing or {variant: 1.0}))


def choose(request_id: str, shares: Mapping[str, float]) -> str:
    """The variant of ``shares`` (variant -> weight > 0, not empty) that serves ``request_id``."""
    if len(shares) == 1:
        return next(iter(shares))
    ordered = sorted(shares.items())
    point = (zlib.crc32(request_id.encode()) / 2**32) * sum(shares.values())
    acc = 0.0
    for v, w in ordered:
        acc += w
        if point < acc:
            return v
    return ordered[-1][0]
