"""Load shedding at the edge: admit a request only if the pipeline can still meet its deadline.

The rule (:func:`decide`, pure) sees what a gateway can see without the planner or the tuner:

- ``in_flight``: requests this gateway admitted that have no answer yet (they are ahead of a new one);
- the service rate: the gateway's own *busy throughput* (answers per second while it had requests in
  flight, over the last ``window_s``) and the planned capacity from the control topic (the planner's
  ``TunerHandoff``: per stage ``mu_qps`` x replicas in force / visit ratio, the slowest stage); the
  lower of the two that are known;
- ``base_ms``: the pipeline's unloaded latency, a low percentile of recent ``done`` latencies.

A new request is predicted to finish after ``base_ms + in_flight / rate``. It is shed (429) when that
is past its budget, and ``Retry-After`` is the time the requests ahead need to drain to where it would
fit (whole seconds, at least 1). Two cases admit without a prediction: no rate known yet (no evidence;
the workers' deadline drop is the backstop), and a budget below ``base_ms`` (waiting would not help: the
request is admitted and the pipeline drops it with its reason, answered 504).

Extreme but valid inputs stay numbers: a rate so low that the wait overflows a double predicts
``None`` (past any budget: shed, the reason says so), ``Retry-After`` is capped at
:data:`MAX_RETRY_S`, and a rate that is not a finite positive number is no evidence (ignored).
The control rules bound the planned rate's inputs besides (``slipstream.streams.control_rules``).
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

NS = 1_000_000_000
MAX_RETRY_S = 3600  # Retry-After past an hour says "much later", not when


@dataclass(frozen=True)
class Load:
    in_flight: int
    observed_qps: float | None  # busy throughput seen by this gateway
    planned_qps: float | None  # pipeline capacity from the control topic
    base_ms: float | None  # unloaded latency


@dataclass(frozen=True)
class Decision:
    admit: bool
    predicted_ms: float | None
    retry_after_s: int = 0
    reason: str = ""


def service_rate(load: Load) -> float | None:
    known = [r for r in (load.observed_qps, load.planned_qps) if r is not None and math.isfinite(r) and r > 0]
    return min(known) if known else None


def decide(load: Load, budget_ms: float) -> Decision:
    """Admit or shed one new request whose latency budget is ``budget_ms``."""
    rate = service_rate(load)
    if rate is None:
        return Decision(True, None, reason="no service rate known yet")
    base = load.base_ms or 0.0
    predicted = base + load.in_flight / rate * 1000.0  # a rate near 0: inf, never an exception
    if predicted <= budget_ms:
        return Decision(True, predicted)
    shown = predicted if math.isfinite(predicted) else None  # answers carry JSON numbers only
    if base > budget_ms:
        return Decision(True, shown, reason=f"budget {budget_ms:.1f} ms below the unloaded latency {base:.1f} ms")
    fits = (budget_ms - base) / 1000.0 * rate  # requests ahead that still leave it on time
    drain_s = (load.in_flight - fits) / rate
    retry = max(1, math.ceil(drain_s)) if drain_s < MAX_RETRY_S else MAX_RETRY_S
    return Decision(False, shown, retry, f"predicted {predicted:.0f} ms > budget {budget_ms:.0f} ms "
                                         f"({load.in_flight} in flight at {rate:.3g} req/s)")


class Outcomes:
    """The gateway's own view of its requests (every method takes ``now_ns``): in flight, busy
    throughput over the last ``window_s``, and the low percentile of recent done latencies."""

    def __init__(self, window_s: float = 5.0, min_answers: int = 5, base_pct: float = 5.0,
                 keep: int = 512) -> None:
        self.window_ns = int(window_s * NS)
        self.min_answers, self.base_pct = min_answers, base_pct
        self.in_flight = 0
        self._busy_since: int | None = None
        self._busy: deque[tuple[int, int]] = deque()  # closed busy intervals (start, end), in order
        self._busy_ns = 0  # their total length: busy time is a sum kept, not recounted per request
        self._answers: deque[int] = deque()  # when each answer came
        self._latencies: deque[float] = deque()  # the last ``keep`` done latencies, in arrival order
        self._sorted: list[float] = []  # the same, sorted: a percentile is a look-up, not a sort per request
        self._keep = keep

    def admitted(self, now_ns: int) -> None:
        if self.in_flight == 0:
            self._busy_since = now_ns
        self.in_flight += 1

    def left(self, now_ns: int, answered: bool, done_latency_ms: float | None = None) -> None:
        """A request stops being in flight: ``answered`` (a result came) or given up on (no result
        by its deadline + grace: not a sign of service)."""
        self.in_flight -= 1
        if answered:
            self._answers.append(now_ns)
        if done_latency_ms is not None:
            self._keep_latency(done_latency_ms)
        if self.in_flight == 0 and self._busy_since is not None:
            self._busy.append((self._busy_since, now_ns))
            self._busy_ns += now_ns - self._busy_since
            self._busy_since = None
        self._trim(now_ns)

    def _keep_latency(self, ms: float) -> None:
        if len(self._latencies) == self._keep:
            del self._sorted[bisect.bisect_left(self._sorted, self._latencies.popleft())]
        self._latencies.append(ms)
        bisect.insort(self._sorted, ms)

    def _trim(self, now_ns: int) -> None:
        cut = now_ns - self.window_ns
        while self._answers and self._answers[0] < cut:
            self._answers.popleft()
        while self._busy and self._busy[0][1] < cut:
            s, e = self._busy.popleft()
            self._busy_ns -= e - s

    def busy_s(self, now_ns: int) -> float:
        """Seconds with requests in flight over the last ``window_s`` (the intervals are disjoint and in
        order: only the oldest kept one can start before the window)."""
        self._trim(now_ns)
        cut = now_ns - self.window_ns
        busy = self._busy_ns
        if self._busy:
            s, e = self._busy[0]
            busy -= max(0, min(e, cut) - s)
        if self._busy_since is not None:
            busy += now_ns - max(self._busy_since, cut)
        return max(0, busy) / NS

    def observed_qps(self, now_ns: int) -> float | None:
        self._trim(now_ns)
        busy = self.busy_s(now_ns)
        if len(self._answers) < self.min_answers or busy <= 0:
            return None
        return len(self._answers) / busy

    def base_ms(self) -> float | None:
        """The ``base_pct`` percentile of the kept done latencies (linear interpolation, as numpy's)."""
        n = len(self._sorted)
        if n < self.min_answers:
            return None
        at = self.base_pct / 100 * (n - 1)
        lo = int(at)
        hi = min(lo + 1, n - 1)
        return self._sorted[lo] + (self._sorted[hi] - self._sorted[lo]) * (at - lo)

    def load(self, now_ns: int, planned_qps: float | None) -> Load:
        return Load(self.in_flight, self.observed_qps(now_ns), planned_qps, self.base_ms())
