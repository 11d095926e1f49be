"""Serve: one window worked off on one replica, as ``slipstream.streams.batching`` describes.

:class:`Server` owns the model runs: the split by variant and accuracy floor, sub-batches and deadline
drops (``slipstream.agents.window``), each run's hand-off to the replica's thread under its deadline
(``slipstream.agents.replicas.run_bounded``; a run past it hands the replica to ``on_hung``), the executor's
input checks, and the run's metrics and predictor update. It keeps nothing between windows: the
config and the variants' state a window is served with come with the window.
"""
from __future__ import annotations

import time
from typing import Callable, Mapping

from ...schemas.records import StageConfig
from ...streams import batching, contract
from ...streams.executor import Executor
from ...streams.heartbeat import Heartbeat
from ...streams.spec import Pipeline
from .. import routing
from ..metrics import StageMetrics, observe_many
from ..replicas import Replica, RunPastDeadline, VariantState, run_bounded, run_deadline_s
from ..window import Item, batch_outputs, failed, split_variants, sub_batch
from . import log

Answers = list[tuple[list[routing.Out], Item]]  # the records each item ends in, with the item


class Server:
    def __init__(self, pipe: Pipeline, stage: str, metrics: StageMetrics, heartbeat: Heartbeat, worker_id: str,
                 on_hung: Callable[[Replica, str], None]) -> None:
        self.pipe, self.stage, self.metrics, self.heartbeat, self.worker_id = pipe, stage, metrics, heartbeat, worker_id
        self.on_hung = on_hung  # a run past its deadline: the replica must be replaced
        self.run_deadline_s = run_deadline_s(pipe.slo_ms)

    async def serve_window(self, replica: Replica, cfg: StageConfig, variants: Mapping[str, VariantState],
                     window: list[Item], s: batching.BatchSettings) -> Answers:
        """(records, item) for every item of ``window``. A window that fails (a bug: model errors
        and contract breaches are error results already) keeps what it answered; the rest are served
        again one by one, so only the item that fails alone ends as an error (``slipstream.agents.window.failed``)."""
        answers: Answers = []
        try:
            await self.work_off(replica, cfg, variants, window, s, answers)
            return answers
        except Exception:
            log.exception("window of %d failed: serving its unanswered items one by one", len(window))
        answered = {id(it) for _, it in answers}
        for it in [it for it in window if id(it) not in answered]:
            one: Answers = []
            try:
                await self.work_off(replica, cfg, variants, [it], s, one)
            except Exception as exc:
                log.exception("request %s failed alone: error result", it.req.request_id)
                one = one or [(failed(self.pipe, self.stage, it, f"{self.stage}: internal error: {exc!r}",
                                      time.time_ns()), it)]
            answers += one
        return answers

    async def work_off(self, replica: Replica, cfg: StageConfig, variants: Mapping[str, VariantState],
                       window: list[Item], s: batching.BatchSettings, answers: Answers) -> None:
        """Run one window on ``replica``, adding (records, item) to ``answers`` (kept when it fails)."""
        groups, floor = split_variants(window, cfg, {n: vs.accuracy for n, vs in variants.items()})
        if floor:
            now = time.time_ns()
            answers += [([routing.ended(self.pipe, it.req, "dropped", why, now)], it) for it, why in floor]
            self.metrics.lab(self.metrics.drops, reason="accuracy-floor").inc(len(floor))
        for variant, pending in groups.items():
            vs = variants[variant]
            while pending:
                if replica.hung:  # the rest of the window cannot run on it
                    answers += [([routing.ended(self.pipe, it.req, "error", replica.hung, time.time_ns())], it)
                                for it in pending]
                    break
                now = time.time_ns()
                step = sub_batch(pending, now, vs.predictor.predict_ns, s)
                if step.dropped:
                    answers += [([routing.ended(self.pipe, it.req, "dropped", why, now)], it)
                                for it, why in step.dropped]
                    self.metrics.lab(self.metrics.drops, reason="deadline").inc(len(step.dropped))
                if step.run:
                    answers += await self._run(replica, variant, vs, step.run)
                pending = step.deferred

    async def _run(self, replica: Replica, variant: str, vs: VariantState, batch: list[Item]) -> Answers:
        """One hand-off to the model thread: the executor's input checks (they decode: images take
        milliseconds), then the model on the items that passed."""
        started = time.time_ns()
        observe_many(self.metrics.lab(self.metrics.queueing), [(started - it.arrival_ns) / 1e9 for it in batch])
        try:
            what = f"model run {self.stage}/{variant} of {len(batch)} on replica {replica.index}"
            bad, outs = await run_bounded(replica, self.heartbeat, self.run_deadline_s, what, check_and_run,
                                          replica.executors[variant], [it.req.payload for it in batch])
            error = None
        except RunPastDeadline as exc:  # its requests get error results; a new replica takes its place
            bad, outs, error = [None] * len(batch), None, str(exc)
            self.on_hung(replica, error)
        except Exception as exc:  # a model error fails this batch, not the worker
            log.exception("model %s failed on a batch of %d", variant, len(batch))
            bad, outs = [None] * len(batch), None
            error = f"model error in {self.stage}/{variant}: {type(exc).__name__}: {exc}"
        finished = time.time_ns()
        good = [it for it, why in zip(batch, bad) if why is None]
        answers = [([routing.ended(self.pipe, it.req, "error", f"{contract.BAD_INPUT_PREFIX}{why}", finished)], it)
                   for it, why in zip(batch, bad) if why is not None]
        if answers:
            self.metrics.lab(self.metrics.results, status="error").inc(len(answers))
        if good:
            if not replica.hung:  # a hung run's time says nothing of the model's
                vs.predictor.observe(len(good), finished - started)
            self.metrics.lab(self.metrics.batch_size, variant=variant).observe(len(good))
            self.metrics.lab(self.metrics.inference, variant=variant).observe((finished - started) / 1e9)
            records = batch_outputs(self.pipe, self.stage, variant, vs.accuracy, good, outs, error, started,
                                    finished, f"{self.worker_id}/{replica.index}", replica.executors[variant].digest)
            self.metrics.lab(self.metrics.results, status="error" if error else "done").inc(len(good))
            answers += zip(records, good)
        return answers


def check_all(ex: Executor, payloads: list[bytes]) -> list[str | None]:
    """The executor's per-item input check (None = fine) for each payload; executors without one
    accept everything."""
    check = getattr(ex, "check", None)
    return [check(p) for p in payloads] if check is not None else [None] * len(payloads)


def check_and_run(ex: Executor, payloads: list[bytes]) -> tuple[list[str | None], list]:
    """On the model thread, in one hand-off: each payload checked and the model run on those that pass
    (:func:`checked_run`); (the reasons, None for the good ones; the good ones' outputs, in order).
    When the model fails on the batch, each item runs alone and an item that fails alone gets a
    reason; a single item that fails (or a model returning a wrong number of outputs) raises."""
    try:
        return checked_run(ex, payloads)
    except Exception:
        if len(payloads) < 2:
            raise
    bad, outs = [], []  # the batch failed: each item alone, so only the one that fails alone is an error
    for p in payloads:
        try:
            why, out = checked_run(ex, [p])
        except Exception as exc:
            why, out = [f"the model fails on this item alone: {type(exc).__name__}: {exc}"[:2000]], []
        bad += why
        outs += out
    return bad, outs


def checked_run(ex: Executor, payloads: list[bytes]) -> tuple[list[str | None], list]:
    """The executor's ``run_checked`` (each payload decoded once) when it has one, else ``check_all``
    then ``run`` on the payloads that pass; refuses a wrong number of outputs."""
    run_checked = getattr(ex, "run_checked", None)
    if run_checked is not None:
        bad, outs = run_checked(payloads)
    else:
        bad = check_all(ex, payloads)
        good = [p for p, why in zip(payloads, bad) if why is None]
        outs = ex.run(good) if good else []
    n = sum(why is None for why in bad)
    if len(outs) != n:
        raise RuntimeError(f"{getattr(ex, 'variant', 'model')} returned {len(outs)} outputs for {n} inputs")
    return bad, outs
