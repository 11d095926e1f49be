"""The gateway's Prometheus metrics (``slipstream_gateway_*``), served on its own port at ``/metrics``."""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..streams.metrics_http import standard_collectors

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass
class GatewayMetrics:
    pipeline: str
    registry: CollectorRegistry
    requests: Counter  # every infer answer, by HTTP code
    shed: Counter  # 429s: shed before admission
    latency: Histogram  # admitted requests, arrival to answer, by result status
    in_flight: Gauge
    planned_qps: Gauge
    control_invalid: Counter  # control records skipped as breaking the control topic's rules

    @classmethod
    def create(cls, pipeline: str, registry: CollectorRegistry | None = None) -> "GatewayMetrics":
        reg = registry or CollectorRegistry()
        standard_collectors(reg)
        lab = {"labelnames": ["pipeline"], "registry": reg}
        return cls(
            pipeline=pipeline, registry=reg,
            requests=Counter("slipstream_gateway_requests", "Infer requests answered, by HTTP status code",
                             ["pipeline", "code"], registry=reg),
            shed=Counter("slipstream_gateway_shed", "Requests shed with 429 (the pipeline could not meet their deadline)", **lab),
            latency=Histogram("slipstream_gateway_latency_seconds", "Admitted requests, arrival at the gateway to answer",
                              ["pipeline", "status"], buckets=LATENCY_BUCKETS, registry=reg),
            in_flight=Gauge("slipstream_gateway_in_flight", "Admitted requests without an answer yet", **lab),
            planned_qps=Gauge("slipstream_gateway_planned_capacity_qps",
                              "Pipeline capacity from the planner's hand-off (NaN: none)", **lab),
            control_invalid=Counter("slipstream_gateway_control_invalid",
                                    "Control records skipped as invalid (logged with their offset)", **lab),
        )

    def answered(self, code: int) -> None:
        self.requests.labels(self.pipeline, str(code)).inc()
