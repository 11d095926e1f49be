"""Prometheus metrics of one stage worker (``slipstream_*``), on a registry of its own so several
workers can share a process in tests. Served on 127.0.0.1 at the worker's metrics port."""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass
class StageMetrics:
    registry: CollectorRegistry
    requests: Counter
    results: Counter
    batch_size: Histogram
    inference: Histogram
    queueing: Histogram
    drops: Counter
    dead_letters: Counter
    config_epoch: Gauge
    config_rejected: Counter
    queue_depth: Gauge
    instances: Gauge
    delivery_failures: Counter

    @classmethod
    def create(cls, pipeline: str, stage: str) -> "StageMetrics":
        reg = CollectorRegistry()
        labels = {"pipeline": pipeline, "stage": stage}

        def L(*names: str) -> list[str]:  # noqa: N802 - short local helper
            return [*labels, *names]

        m = cls(
            registry=reg,
            requests=Counter("slipstream_requests", "Requests taken from the stage input", L(), registry=reg),
            results=Counter("slipstream_results", "Items finished by status", L("status"), registry=reg),
            batch_size=Histogram("slipstream_batch_size", "Batch size run", L("variant"),
                                 buckets=BATCH_BUCKETS, registry=reg),
            inference=Histogram("slipstream_inference_seconds", "Batch inference latency (batch sizes: "
                                "slipstream_batch_size)", L("variant"), buckets=LATENCY_BUCKETS, registry=reg),
            queueing=Histogram("slipstream_queueing_seconds", "Enqueue to batch start",
                               L(), buckets=LATENCY_BUCKETS, registry=reg),
            drops=Counter("slipstream_drops", "Requests dropped by reason", L("reason"), registry=reg),
            dead_letters=Counter("slipstream_dead_letters", "Records sent to the dead-letter topic",
                                 L(), registry=reg),
            config_epoch=Gauge("slipstream_config_epoch", "Epoch of the config in force", L(), registry=reg),
            config_rejected=Counter("slipstream_config_rejected", "Control records rejected", L(),
                                    registry=reg),
            queue_depth=Gauge("slipstream_queue_depth", "Requests waiting in this worker", L(), registry=reg),
            instances=Gauge("slipstream_instances", "Model instances serving in this worker", L(),
                            registry=reg),
            delivery_failures=Counter("slipstream_delivery_failures", "Outputs not delivered at first, by what "
                                      "followed: retried, replaced (error result or dead letter), given-up",
                                      L("outcome"), registry=reg),
        )
        m._labels = labels
        m._children = {}
        return m

    def lab(self, metric, **extra):
        """The labelled child of ``metric`` (cached: ``labels()`` is costly on the per-request path)."""
        key = (id(metric), tuple(extra.items()))
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(**self._labels, **extra)
        return child

    def serve(self, port: int = 0) -> int:
        """Start the HTTP endpoint; returns the bound port (0 picks a free one)."""
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        return server.server_port
