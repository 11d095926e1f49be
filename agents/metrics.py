"""Prometheus metrics of one stage worker or join worker (``slipstream_*``, all labelled ``pipeline``,
``stage``), on a registry of its own so several workers can share a process in tests. Served with
``/healthz`` and ``/readyz`` by ``slipstream.streams.metrics_http`` (see ``slipstream.agents.ready``); the names and what
they count are listed in docs/observability.md.

Every result a worker produces to the pipeline's results topic (a sink's result, a request dropped
or failed on the way, a join's whole result) is observed once here: its end-to-end latency
(``finished_ns - created_ns``, done results) and whether it met its deadline (``done`` and
``finished_ns <= deadline_ns``: loadgen's definition of attainment, so Prometheus and the loadgen
report agree).
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..schemas.records import InferenceResult
from ..streams import topics
from ..streams.metrics_http import Endpoint, MetricsAddr, Ready, serve, standard_collectors

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
E2E_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
STATUSES = ("done", "dropped", "error")
NS_PER_S = 1e9


def observe_many(hist, amounts: Iterable[float]) -> None:
    """``hist.observe(a)`` for each of ``amounts`` (a labelled ``Histogram``; no exemplars), with one
    update of its sum and one per bucket hit instead of one of each per amount (each takes a lock).
    It writes prometheus_client's internals (``_sum``; ``_buckets``, non-cumulative counts per
    ``_upper_bounds``), private, so as of the version pinned in constraints.txt (0.26.0);
    ``tests/unit/agents/test_metrics.py`` holds it equal to ``observe``."""
    counts: dict[int, int] = {}
    total = 0.0
    bounds = hist._upper_bounds
    for a in amounts:
        i = bisect_left(bounds, a)  # the first bound >= a, as observe's scan finds it
        counts[i] = counts.get(i, 0) + 1
        total += a
    if counts:
        hist._raise_if_not_observable()
        hist._sum.inc(total)
        for i, n in counts.items():
            hist._buckets[i].inc(n)


def e2e_buckets(slo_s: float | None) -> tuple[float, ...]:
    """End-to-end buckets with the SLO itself as a bound, so "within the SLO" is read exactly."""
    return tuple(sorted(set(E2E_BUCKETS) | ({round(slo_s, 6)} if slo_s else set())))


@dataclass
class StageMetrics:
    registry: CollectorRegistry
    pipeline: str
    requests: Counter
    results: Counter
    batch_size: Histogram
    inference: Histogram
    queueing: Histogram
    drops: Counter
    dead_letters: Counter
    config_epoch: Gauge
    config_rejected: Counter
    control_invalid: Counter
    queue_depth: Gauge
    replicas: Gauge
    backlog: Gauge
    delivery_failures: Counter
    e2e: Histogram
    slo_met: Counter
    slo_missed: Counter
    slo: Gauge
    lag: Gauge
    model: Gauge
    _labels: dict = field(default_factory=dict)
    _children: dict = field(default_factory=dict)
    _models: set = field(default_factory=set)
    _lag_tps: set = field(default_factory=set)

    @classmethod
    def create(cls, pipeline: str, stage: str, slo_ms: float | None = None) -> "StageMetrics":
        reg = CollectorRegistry()
        standard_collectors(reg)
        labels = {"pipeline": pipeline, "stage": stage}

        def L(*names: str) -> list[str]:  # noqa: N802 - short local helper
            return [*labels, *names]

        m = cls(
            registry=reg, pipeline=pipeline,
            requests=Counter("slipstream_requests", "Requests taken from the stage input", L(), registry=reg),
            results=Counter("slipstream_results", "Items finished by status", L("status"), registry=reg),
            batch_size=Histogram("slipstream_batch_size_requests", "Requests per batch run", L("variant"),
                                 buckets=BATCH_BUCKETS, registry=reg),
            inference=Histogram("slipstream_inference_seconds", "Batch inference latency (batch sizes: "
                                "slipstream_batch_size_requests)", L("variant"), buckets=LATENCY_BUCKETS,
                                registry=reg),
            queueing=Histogram("slipstream_queueing_seconds", "Enqueue to batch start",
                               L(), buckets=LATENCY_BUCKETS, registry=reg),
            drops=Counter("slipstream_drops", "Requests dropped by reason", L("reason"), registry=reg),
            dead_letters=Counter("slipstream_dead_letters", "Records sent to the dead-letter topic",
                                 L(), registry=reg),
            config_epoch=Gauge("slipstream_config_epoch", "Epoch of the config in force", L(), registry=reg),
            config_rejected=Counter("slipstream_config_rejected", "Control records rejected", L(),
                                    registry=reg),
            control_invalid=Counter("slipstream_control_invalid", "Control records skipped as invalid "
                                    "(slipstream.streams.control_rules: key, fields, bounds)", L(), registry=reg),
            queue_depth=Gauge("slipstream_queued_requests", "Requests waiting in this worker", L(), registry=reg),
            replicas=Gauge("slipstream_replicas", "Model replicas serving in this worker", L(),
                            registry=reg),
            backlog=Gauge("slipstream_delivery_backlog_windows", "Windows (and dead letters) whose outputs "
                          "await delivery; bounded (slipstream.agents.backlog)", L(), registry=reg),
            delivery_failures=Counter("slipstream_delivery_failures", "Outputs not delivered at first, by what "
                                      "followed: retried, replaced (error result or dead letter), given-up",
                                      L("outcome"), registry=reg),
            e2e=Histogram("slipstream_request_duration_seconds", "End to end, request created to result "
                          "(done results produced to the results topic here)", L(),
                          buckets=e2e_buckets(slo_ms / 1e3 if slo_ms else None), registry=reg),
            slo_met=Counter("slipstream_slo_met", "Results produced here that were done by their deadline",
                            L(), registry=reg),
            slo_missed=Counter("slipstream_slo_missed", "Results produced here that missed their deadline, "
                               "by status (done = late)", L("status"), registry=reg),
            slo=Gauge("slipstream_slo_seconds", "The pipeline's end-to-end latency SLO", L(), registry=reg),
            lag=Gauge("slipstream_consumer_lag_records", "High watermark minus committed offset, per "
                      "assigned input partition", L("topic", "partition"), registry=reg),
            model=Gauge("slipstream_model_info", "Model variants loaded here (always 1)", L("variant", "digest"),
                        registry=reg),
        )
        m._labels = labels
        for unlabelled in (m.slo_met, m.requests, m.dead_letters, m.config_rejected, m.control_invalid,
                           m.queue_depth, m.replicas, m.backlog):
            m.lab(unlabelled)  # every series exists from the start (at 0): rates, ratios and scrapes are defined
        for status in STATUSES:
            m.lab(m.slo_missed, status=status)
        if slo_ms:
            m.lab(m.slo).set(slo_ms / 1e3)
        return m

    def lab(self, metric, **extra):
        """The labelled child of ``metric`` (cached: ``labels()`` is costly on the per-request path)."""
        key = (id(metric), tuple(extra.items()))
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(**self._labels, **extra)
        return child

    def observe_outputs(self, outs: Iterable[Any]) -> None:
        """Observe the results among a worker's outputs (``slipstream.agents.routing.Out``), as
        :meth:`observe_result` would one by one, with one update per series."""
        results = topics.results(self.pipeline)
        self.observe_results([o.value for o in outs if o.topic == results and o.record == "InferenceResult"])

    def observe_result(self, r: InferenceResult) -> None:
        """One result on the results topic: end-to-end latency and SLO met/missed."""
        self.observe_results([r])

    def observe_results(self, rs: list[InferenceResult]) -> None:
        """Results on the results topic: each one's end-to-end latency (done ones) and SLO met/missed."""
        e2e: list[float] = []
        met, missed = 0, {}
        for r in rs:
            done = r.status == "done"
            if done:
                e2e.append((r.finished_ns - r.created_ns) / NS_PER_S)
            if done and r.finished_ns <= r.deadline_ns:
                met += 1
            else:
                missed[r.status] = missed.get(r.status, 0) + 1
        observe_many(self.lab(self.e2e), e2e)
        if met:
            self.lab(self.slo_met).inc(met)
        for status, n in missed.items():
            self.lab(self.slo_missed, status=status).inc(n)

    def observe_fleet(self, fleet: Any) -> None:
        """The worker's replicas (``slipstream.agents.replicas.Fleet``): their count, and one info series
        per (variant, digest) loaded."""
        self.lab(self.replicas).set(len(fleet.replicas))
        now = {(v, getattr(ex, "digest", "")) for r in fleet.replicas for v, ex in r.executors.items()}
        for v, d in self._models - now:
            self.model.remove(*self._labels.values(), v, d)
        for v, d in now:
            self.model.labels(**self._labels, variant=v, digest=d).set(1)
        self._models = now

    def observe_lag(self, lags: Mapping[tuple[str, int], int]) -> None:
        """Lag per assigned (topic, partition); partitions no longer assigned are removed."""
        for topic, part in self._lag_tps - set(lags):
            self.lag.remove(*self._labels.values(), topic, str(part))
        for (topic, part), n in lags.items():
            self.lag.labels(**self._labels, topic=topic, partition=str(part)).set(n)
        self._lag_tps = set(lags)

    def serve(self, addr: MetricsAddr, ready: Ready = lambda: None, alive: Ready = lambda: None) -> Endpoint:
        """Start the HTTP endpoint (``/metrics``, ``/healthz``, ``/readyz``) on ``addr``."""
        return serve(addr, self.registry, ready, alive)
