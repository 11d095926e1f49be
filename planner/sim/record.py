"""What happened in a run, logged cheaply in the hot loop and turned into a ``SimResult`` at the end.

The loop only appends: each batch's stage, end time, requests and their produce times (a visit), the
fragments that end (with their time), the requests that split (k > 1 children somewhere), and every
deadline drop. Nothing in the simulation depends on when a request completes (the join feeds
nothing back), so the per-request figures are computed afterwards with numpy:

- residence at a stage: the longest, over the request's items there, of batch end - produce time
  (the previous hop's finish, or the client's send): transit in + queue + batch, as a hop's
  ``finished_ns - enqueued_ns`` in the data plane;
- completion: a request that never split ends with its one fragment; a split one at the join, when
  the last of its fragments has arrived there (fragment end + a ``to_join`` transit + the join's
  fetch); either way its result then takes a ``to_results`` transit and the client's fetch;
- a request is dropped when any of its items was; its first drop gives stage and reason.
"""
from __future__ import annotations

import numpy as np

from ...streams.batching import NS_PER_MS
from ..results import SimResult
from .params import Network, Transit, next_fetch



class Log:
    """Appended to by the event loop (lists) and by ``stagewise`` (whole numpy chunks)."""

    __slots__ = ("visit_r", "visit_s", "run_stage", "run_end", "run_n", "end_r", "end_t", "end_n", "split",
                 "drop_r", "drop_stage", "drop_now", "drop_pred", "shed", "visit_chunks", "end_chunks", "chunk_batches")

    def __init__(self) -> None:
        self.visit_r: list[int] = []
        self.visit_s: list[int] = []
        self.run_stage: list[int] = []
        self.run_end: list[int] = []
        self.run_n: list[int] = []
        self.end_r: list[int] = []
        self.end_t: list[int] = []
        self.end_n: list[int] = []
        self.split: list[int] = []
        self.drop_r: list[int] = []
        self.drop_stage: list[int] = []
        self.drop_now: list[int] = []
        self.drop_pred: list[int] = []
        self.shed: list[int] = []  # requests the source's gate shed (``slipstream.planner.sim.gate``)
        self.visit_chunks: list[tuple] = []  # (stage, ends, requests, produce times)
        self.end_chunks: list[tuple[np.ndarray, np.ndarray]] = []
        self.chunk_batches = 0

    def visit(self, stage: int, now: int, reqs: list[int], sent: list[int]) -> None:
        self.visit_r += reqs
        self.visit_s += sent
        self.run_stage.append(stage)
        self.run_end.append(now)
        self.run_n.append(len(reqs))

    def ends(self, now: int, reqs: list[int]) -> None:
        self.end_r += reqs
        self.end_t.append(now)
        self.end_n.append(len(reqs))

    def visit_chunk(self, stage: int, ends: np.ndarray, reqs: np.ndarray, sent: np.ndarray, batches: int) -> None:
        """Many visits at once: per item its batch's end, request and produce time."""
        self.visit_chunks.append((np.int64(stage), ends, reqs, sent))
        self.chunk_batches += batches

    def ends_chunk(self, ends: np.ndarray, reqs: np.ndarray) -> None:
        self.end_chunks.append((ends, reqs))

    def visits(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Chunks of (stage, batch end, request, produce time) per item of every batch."""
        own = (np.repeat(np.asarray(self.run_stage, dtype=np.int64), self.run_n),
               np.repeat(np.asarray(self.run_end, dtype=np.int64), self.run_n),
               np.asarray(self.visit_r, dtype=np.int64), np.asarray(self.visit_s, dtype=np.int64))
        return [own, *self.visit_chunks]

    def fragment_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """(time, request) per fragment that ended (a sink, or no children)."""
        own = (np.repeat(np.asarray(self.end_t, dtype=np.int64), self.end_n), np.asarray(self.end_r, dtype=np.int64))
        return tuple(np.concatenate([c[k] for c in (own, *self.end_chunks)]) for k in range(2))

    def drops(self, reqs: list[int], stage: int, now: int, pred1: int) -> None:
        for r in reqs:
            self.drop_r.append(r)
            self.drop_stage.append(stage)
            self.drop_now.append(now)
            self.drop_pred.append(pred1)

    def refuse(self, req: int, stage: int, now: int, pred1: int, shed: bool) -> None:
        """A request the source's gate refused (``slipstream.planner.sim.gate``): expired, or ``shed``."""
        self.drops([req], stage, now, pred1)
        if shed:
            self.shed.append(req)

    @property
    def batches(self) -> int:
        return len(self.run_end) + self.chunk_batches


def residence_ms(log: Log, n: int, stages: int) -> np.ndarray:
    """[requests, stages] longest residence in ms; NaN where a request never visited a stage."""
    out = np.full(n * stages, -1, dtype=np.int64)
    for stage, ends, reqs, sent in log.visits():
        np.maximum.at(out, reqs * stages + stage, ends - sent)
    res = out.reshape(n, stages).astype(float)
    return np.where(res < 0, np.nan, res / NS_PER_MS)


def after_hop(t: np.ndarray, transit: Transit, fetch: tuple[int, int] | None,
              rng: np.random.Generator) -> np.ndarray:
    """Times ``t`` (ns) plus a transit each, then the consumer's next fetch (None: none)."""
    if not (transit.is_constant and transit.mean_ms == 0):
        t = t + transit.sample_ns(rng, t.size)
    return t if fetch is None else next_fetch(t, fetch)


def finish_ns(log: Log, n: int, network: Network, fetch: list, rng: np.random.Generator) -> np.ndarray:
    """Per request: when its result reaches the client (-1 when no fragment of it ended)."""
    et, er = log.fragment_ends()
    if log.split:
        split = np.zeros(n, dtype=bool)
        split[np.asarray(log.split, dtype=np.int64)] = True
        joined = split[er]
        et[joined] = after_hop(et[joined], network.to_join, fetch[0], rng)
    fin = np.full(n, -1, dtype=np.int64)
    np.maximum.at(fin, er, et)
    done = fin >= 0
    fin[done] = after_hop(fin[done], network.to_results, fetch[1], rng)
    return fin


def to_result(log: Log, *, slo_ms: float, names: tuple[str, ...], arrival_s: np.ndarray, arrival_ns: np.ndarray,
              deadline_ns: np.ndarray, finish: np.ndarray, events: int) -> SimResult:
    n, n_st = int(arrival_s.size), len(names)
    dropped = np.zeros(n, dtype=bool)
    drop_stage = np.full(n, -1, dtype=np.int16)
    drop_info = np.zeros((n, 3), dtype=np.int64)
    if log.drop_r:
        now, stage = np.asarray(log.drop_now, dtype=np.int64), np.asarray(log.drop_stage)
        order = np.lexsort((stage, now))  # each request's first drop: earliest, then upstream
        reqs, first = np.unique(np.asarray(log.drop_r, dtype=np.int64)[order], return_index=True)
        first = order[first]
        dropped[reqs] = True
        drop_stage[reqs] = stage[first]
        drop_info[reqs] = np.stack([deadline_ns[reqs], now[first], np.asarray(log.drop_pred)[first]], axis=1)
    lost = ~dropped & (finish < 0)
    if lost.any():
        raise AssertionError(f"simulator bug: {int(lost.sum())} requests neither finished nor dropped "
                             f"(first: request {int(np.flatnonzero(lost)[0])})")
    lat = np.where(dropped, np.nan, (finish - arrival_ns) / NS_PER_MS)
    shed = np.zeros(n, dtype=bool)
    shed[np.asarray(log.shed, dtype=np.int64)] = True
    return SimResult(slo_ms, names, arrival_s, lat, dropped, drop_stage, drop_info,
                     residence_ms(log, n, n_st), log.batches, events, shed)
