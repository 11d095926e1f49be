"""Delivery of a window's outputs: every input ends in Kafka as its output, or as an error result
naming why the output could not be written, or as a dead letter of the input itself, and the worker
keeps running either way.

- A transient failure (Kafka's own ``retriable`` flag: broker away, leader moving, a topic or partition
  the metadata does not show yet; a timeout, a lost connection) sends the same record again, backing
  off up to ``max_backoff_s``, for at most ``retry_for_s`` (Kafka's ``delivery.timeout.ms``, 120 s);
  nothing is acked before, so nothing is lost. Past that bound it is handled as a permanent one.
- A permanent one (the record over its topic's limit, ``slipstream.streams.limits``; a value the schema refuses;
  no authorization) replaces the output (``slipstream.agents.routing.replacement``) by an ``error`` result for the
  request it belonged to; if even that cannot be written, the input is dead-lettered (its original
  bytes, cut to fit the dead-letter topic with the whole input's size and sha256 named, topic,
  partition, offset and the reason).
- If the dead letter cannot be written either, the input is *given up*: :meth:`Delivery.settle` names
  it, the worker does not ack it and reports itself not live (``slipstream.streams.heartbeat``), so it is
  restarted and the input read again.
- Every wait on the producer has the same bound: a delivery future still unanswered ``retry_for_s``
  after the record was first sent (an idempotent producer retries a batch for ever, e.g. towards a
  broker it cannot reach) counts as not delivered within it, and is replaced as above. A broker that
  took the batch without the answer arriving means a second answer for that request, as after a
  crash under at-least-once.
- A producer the broker refused a batch of (or whose batch outlived the bound) is replaced when the
  Delivery owns it (``renew``, at least once; under exactly-once ``slipstream.agents.transactions`` replaces
  it): an idempotent producer keeps a refused batch's sequence numbers, so every later batch of the
  partition would be refused (``OutOfOrderSequenceNumber``, which also stops aiokafka's sender and
  fails all it holds). A record refused for its sequence number is sent again on the new producer.
A window goes out as one producer batch per partition, each no larger than its topic takes; a batch
that fails fails each of its records, and each is then handled as above (sent again on its own, or
replaced). Each step is logged with the request id.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, NamedTuple

from ..streams import kafka as kclient
from ..streams.config import KafkaSettings
from ..streams.limits import Limits
from ..streams.spec import Pipeline
from . import routing

log = logging.getLogger(__name__)


class Sent(NamedTuple):  # one per output: a tuple is the cheapest record to make
    out: routing.Out
    item: Any  # the queued input it answers (``.req``, ``.record``: ``slipstream.agents.window.Item``); None: nothing to answer
    fut: Any = None  # the producer's delivery future
    error: BaseException | None = None  # raised before a future existed (encode, record too large)
    prod: Any = None  # the producer it went to


STOP_S = 15.0  # a replaced producer's stop: what it still holds is answered or abandoned by then


class Delivery:
    def __init__(self, producer, pipe: Pipeline, stage: str, on_failure=lambda kind: None,
                 max_backoff_s: float = 5.0, limits: Limits | None = None, retry_for_s: float = 120.0,
                 renew: Callable[[], Awaitable[Any]] | None = None) -> None:
        self.producer, self.pipe, self.stage = producer, pipe, stage
        self.on_failure = on_failure  # a metric: "retried", "replaced", "given-up" or "producer-replaced"
        self.max_backoff_s, self.retry_for_s = max_backoff_s, retry_for_s
        self.limits = limits  # the topics' record limits (``slipstream.streams.limits``); None: the producer's only
        self.renew = renew  # a new started producer; None: the producer is not this Delivery's to replace
        self._renewing = asyncio.Lock()
        self._retired: set[asyncio.Future] = set()  # replaced producers stopping
        self._waiting: list[tuple[list, asyncio.Future]] = []  # windows for the next send_window
        self._sender: asyncio.Future | None = None

    @classmethod
    async def started(cls, kafka: KafkaSettings, pipe: Pipeline, stage: str, on_failure=lambda kind: None,
                      limits: Limits | None = None, **overrides: Any) -> "Delivery":
        """A Delivery owning its producer (``slipstream.streams.kafka.producer`` with ``overrides``), started, and
        replacing it with a new one like it after a refused batch; :meth:`close` stops it."""
        async def start():
            return await kclient.start_producer(kclient.producer(kafka, **overrides), STOP_S)

        return cls(await start(), pipe, stage, on_failure, limits=limits, renew=start)

    async def close(self) -> None:
        """Stop the producer (and those replaced, still stopping)."""
        await kclient.stop_producer(self.producer, STOP_S)
        await asyncio.gather(*self._retired, return_exceptions=True)

    async def send_all(self, pairs: list[tuple[routing.Out, Any]]) -> list[Sent]:
        """Send a window's records, each with the input it answers, as one producer batch per
        partition (``slipstream.streams.kafka.send_window``); a record's future is its batch's. Windows that
        come while the previous send waits for the producer (its last batch of a partition not yet
        taken by the sender) go out together in the next, so batches grow with the broker's round
        trip, as the producer's own batches do."""
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((pairs, done))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.ensure_future(self._send_waiting())
        return await done

    async def _send_waiting(self) -> None:
        while self._waiting:
            taken, self._waiting = self._waiting, []
            prod = self.producer
            try:
                futs = iter(await kclient.send_window(prod, [o for ps, _ in taken for o, _ in ps], self.limits))
            except BaseException as exc:  # cancelled (shutting down) or a bug: every waiting caller hears it
                taken, self._waiting = taken + self._waiting, []
                for _, done in taken:
                    if not done.done():
                        done.cancel() if isinstance(exc, asyncio.CancelledError) else done.set_exception(exc)
                raise
            for pairs, done in taken:  # zip stops at the end of ``pairs``: ``futs`` goes on to the next window
                sent = [Sent(o, item, None, f, prod) if isinstance(f, BaseException) else Sent(o, item, f, None, prod)
                        for (o, item), f in zip(pairs, futs)]
                if not done.done():  # else its caller was cancelled; its records went out all the same
                    done.set_result(sent)

    async def _send_one(self, out: routing.Out, item: Any) -> Sent:
        prod = self.producer
        fut = (await kclient.send_window(prod, [out], self.limits))[0]
        return Sent(out, item, None, fut, prod) if isinstance(fut, BaseException) else Sent(out, item, fut, None, prod)

    async def replace_refused(self, s: Sent) -> Sent | None:
        """``s`` as sent: when its record was refused before it went out (encode, too large), what
        replaces it (:meth:`send_instead`), until one goes out; None when nothing can."""
        while s is not None and s.error is not None:
            s = await self.send_instead(s, s.error)
        return s

    async def send_instead(self, s: Sent, exc: BaseException) -> Sent | None:
        """Send what replaces ``s``'s output, which failed for good with ``exc`` (:meth:`_instead`);
        None when nothing can replace it."""
        nxt = self._instead(s, exc)
        return None if nxt is None else await self._send_one(nxt, s.item)

    def _instead(self, s: Sent, exc: BaseException) -> routing.Out | None:
        """What replaces ``s``'s output, failed for good with ``exc``
        (``slipstream.agents.routing.replacement``: an error result, else a dead letter), logged and
        counted; None when nothing can: given up."""
        nxt = routing.replacement(self.pipe, self.stage, self.limits, s.out, s.item, exc)
        if nxt is None:
            log.error("request %s: cannot deliver %s to %s (%s), nor anything in its place: given up",
                      _rid(s), s.out.record, s.out.topic, exc)
            self.on_failure("given-up")
            return None
        log.error("request %s: cannot deliver %s to %s (%s): sending %s instead", _rid(s), s.out.record,
                  s.out.topic, exc, nxt.record)
        self.on_failure("replaced")
        return nxt

    def next_attempt(self, sent: list[Sent | None], failed: list[tuple[Sent, BaseException]]
                     ) -> list[tuple[routing.Out, Any]]:
        """The records to send again after ``failed`` (each a sent record and why it failed): those
        refused for good replaced (counted; dropped when nothing can replace them), everything else
        as it was (a transaction's next attempt)."""
        bad = {id(s): exc for s, exc in failed}
        out = []
        for s in sent:
            if s is None:
                continue
            exc = bad.get(id(s))
            if exc is not None and not kclient.is_transient(exc) and not kclient.is_out_of_order(exc):
                if (nxt := self._instead(s, exc)) is not None:
                    out.append((nxt, s.item))
                continue
            out.append((s.out, s.item))
        return out

    async def settle(self, sent: list[Sent]) -> list[int]:
        """Wait until each output, or what replaced it, is in Kafka; never raises. Returns the
        indexes (in ``sent``) of those given up: neither they nor anything in their place is in Kafka."""
        lost = []
        for i, s in enumerate(sent):
            f = s.fut
            if f is not None and f.done() and not f.cancelled() and f.exception() is None:
                continue  # delivered (most of a window, once its first record is)
            if not await self._settle_one(s):
                lost.append(i)
        return lost

    async def _settle_one(self, s: Sent) -> bool:
        backoff, since = 0.1, time.monotonic()
        while True:
            exc = s.error if s.error is not None else await self._outcome(s.fut, since)
            if exc is None:
                return True
            if kclient.is_out_of_order(exc) or (s.error is None and not kclient.is_transient(exc)):
                await self._renew(s.prod, exc)  # refused by the broker, or past the bound: sequence broken
            waited = time.monotonic() - since
            again = kclient.is_transient(exc) or kclient.is_out_of_order(exc)
            if again and waited >= self.retry_for_s:
                exc = TimeoutError(f"not delivered within {self.retry_for_s:g} s: {type(exc).__name__}: {exc}")
            elif again:
                log.warning("request %s: %s to %s not delivered (%s): sending again in %.1f s", _rid(s),
                            s.out.record, s.out.topic, exc, backoff)
                self.on_failure("retried")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
                s = await self._send_one(s.out, s.item)
                continue
            s = await self.send_instead(s, exc)
            if s is None:
                return False
            backoff, since = 0.1, time.monotonic()

    async def _outcome(self, fut, since: float) -> BaseException | None:
        """How a delivery future ended: None when delivered, else its failure; a TimeoutError when it
        is still unanswered ``retry_for_s`` after ``since`` (left running: the producer owns it)."""
        if not fut.done():
            await asyncio.wait([fut], timeout=max(since + self.retry_for_s - time.monotonic(), 0))
        if not fut.done():
            return TimeoutError(f"not delivered within {self.retry_for_s:g} s: no answer from the broker")
        return asyncio.CancelledError() if fut.cancelled() else fut.exception()

    async def _renew(self, old, exc: BaseException) -> None:
        """Replace ``old`` by a new producer, once (whoever sees its failure first), if it is still the
        one in use and this Delivery owns it; the old one stops in the background (bounded)."""
        if self.renew is None or old is not self.producer:
            return
        async with self._renewing:
            if old is not self.producer:
                return
            try:
                self.producer = await self.renew()
            except Exception as err:  # noqa: BLE001 - the broker away: the next failure tries again
                log.error("cannot replace the producer after %r: %r", exc, err)
                return
        log.warning("producer replaced after %r (its sequence numbers no longer match the broker's)", exc)
        self.on_failure("producer-replaced")
        kclient.retire_producer(old, self._retired, STOP_S)


def _rid(s: Sent) -> str:
    if s.item is not None:
        return str(s.item.req.request_id)
    return str(getattr(s.out.value, "request_id", "-"))

