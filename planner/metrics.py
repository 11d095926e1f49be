"""Prometheus metrics of the planner service (``slipstream_planner_*``): what each re-plan forecast,
chose and predicted (docs/observability.md lists them)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from planner.service import ReplanOutput


class PlannerMetrics:
    def __init__(self, pipeline: str, registry: CollectorRegistry) -> None:
        self.pipeline = pipeline
        kw = {"registry": registry}
        self.replans = Counter("slipstream_planner_replans", "Re-plans by outcome: changed (published), "
                               "unchanged, infeasible", ["pipeline", "outcome"], **kw)
        self.forecast = Gauge("slipstream_planner_forecast_requests_per_second", "Forecast peak arrival rate "
                              "planned for", ["pipeline"], **kw)
        self.cost = Gauge("slipstream_planner_cost_dollars_per_hour", "Cost per hour of the latest plan",
                          ["pipeline"], **kw)
        self.p99 = Gauge("slipstream_planner_predicted_p99_seconds", "The estimator's p99 for the latest plan "
                         "(misses counted as late)", ["pipeline"], **kw)
        self.replicas = Gauge("slipstream_planner_replicas", "Replicas of the latest plan per stage",
                              ["pipeline", "stage"], **kw)
        self.control_invalid = Counter("slipstream_planner_control_invalid", "Control records skipped as "
                                       "invalid (streams.control_rules)", ["pipeline"], **kw)
        for outcome in ("changed", "unchanged", "infeasible"):
            self.replans.labels(pipeline, outcome)

    def observe(self, out: ReplanOutput) -> None:
        p, plan = self.pipeline, out.plan
        outcome = "changed" if out.changed else ("unchanged" if plan.feasible else "infeasible")
        self.replans.labels(p, outcome).inc()
        self.forecast.labels(p).set(out.forecast_qps)
        if not plan.feasible:
            return
        self.cost.labels(p).set(plan.cost_per_hour)
        if plan.predicted_p99_ms is not None:
            self.p99.labels(p).set(plan.predicted_p99_ms / 1e3)
        for s in plan.stages:
            self.replicas.labels(p, s.stage).set(sum(a.replicas for a in s.assignments))
