"""A worker's readiness, its HTTP endpoint and its consumer-lag gauge.

Ready = the model is loaded and warm (``started``), nothing the worker reports stands in the way
(``blocked``: the join worker's memory of answered requests not refilled) and the consumer has
partitions. It shows twice:

- ``/readyz`` on the metrics address answers 200, else 503 with the reason (``model not warm``, the
  worker's own reason, ``no partitions assigned``); ``/healthz`` answers 200 while the worker's heartbeat (``slipstream.streams.heartbeat``:
  the event loop ticks, no model run is past its deadline) says it is live, else 503 with the reason;
- a line on stdout after each rebalance, once warm: ``slipstream-worker ready stage=<s>
  partitions=<n> metrics=<host:port> at_ns=<t>``. The supervisor, the tests and the activation-time
  benchmark wait for it.

Once first ready, the process settles its garbage collector (``slipstream.streams.settle.settle_gc``,
once, after the model is warm): that raised a no-op worker's drain rate by about 15 %
(docs/dataplane.md).

Lag (``slipstream_consumer_lag_records``) is read once a second from the consumer's own state: the
partition's high watermark from the last fetch minus the offset after the worker's finished prefix
(what it commits), for each assigned partition; no request goes to the broker for it.
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable

import faust

from ..streams.heartbeat import Heartbeat
from ..streams.metrics_http import MetricsAddr
from ..streams.settle import settle_gc
from .acks import AckTracker
from .metrics import StageMetrics

LAG_INTERVAL_S = 1.0
class Readiness:
    def __init__(self, started: asyncio.Event | None, blocked: Callable[[], str | None] = lambda: None) -> None:
        self.started, self.blocked = started, blocked
        self.partitions = 0  # as of the last completed rebalance (set on the event loop)

    def reason(self) -> str | None:
        """None when ready, else why not (called from the HTTP thread: reads plain values)."""
        if self.started is not None and not self.started.is_set():
            return "model not warm"
        if (why := self.blocked()) is not None:
            return why
        if self.partitions == 0:
            return "no partitions assigned"
        return None


def consumer_lag(consumer, acks: AckTracker | None = None) -> dict[tuple[str, int], int]:
    """(topic, partition) -> high watermark minus the offset after the worker's finished prefix, for
    the assigned partitions whose high watermark is known (after the first fetch). The finished prefix
    is the worker's own (``acks``: what it commits, by faust or in a transaction), else faust's
    ``_committed_offset`` (the offsets faust committed and, after assignment, the group's position)."""
    out = {}
    for tp in consumer.assignment():
        high = consumer.highwater(tp)
        if high is None:
            continue
        done = acks.committable({tp}).get(tp) if acks is not None else None
        committed = max(done or 0, consumer._committed_offset.get(tp) or 0)
        out[(tp.topic, tp.partition)] = max(int(high) - int(committed), 0)
    return out


def serve_worker(role: str, app: faust.App, metrics: StageMetrics, addr: MetricsAddr,
                 started: asyncio.Event | None = None, acks: AckTracker | None = None,
                 heartbeat: Heartbeat | None = None, blocked: Callable[[], str | None] = lambda: None) -> Readiness:
    """Serve the worker's metrics, health (its ``heartbeat``, ticked by a task of the app) and
    readiness (``blocked``: the worker's own reason not to be ready) on ``addr``; print the ready line
    after each rebalance once warm (in a task of its own: the rebalance must not wait for it); keep
    the lag gauge."""
    ready = Readiness(started, blocked)
    heartbeat = heartbeat or Heartbeat()
    bound = metrics.serve(addr, ready.reason, heartbeat.problem).addr

    @app.task
    async def beat() -> None:  # the event loop's heartbeat
        await heartbeat.beat()

    async def announce() -> None:
        if started is not None:
            await started.wait()
        ready.partitions = len(app.consumer.assignment())
        settle_gc()
        print(f"slipstream-worker ready stage={role} partitions={ready.partitions} "
              f"metrics={bound} at_ns={time.time_ns()}", flush=True)

    async def on_rebalance_complete(sender, **kwargs) -> None:
        asyncio.ensure_future(announce())

    async def on_revoked(sender, revoked, **kwargs) -> None:
        ready.partitions = 0  # rebalancing: back when it completes

    app.on_rebalance_complete.connect(on_rebalance_complete)
    app.on_partitions_revoked.connect(on_revoked)

    @app.timer(LAG_INTERVAL_S)
    async def observe_lag() -> None:
        try:
            lags = consumer_lag(app.consumer, acks)
        except Exception:  # the consumer not started yet, or between generations: next second
            return
        metrics.observe_lag(lags)

    return ready
