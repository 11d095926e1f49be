"""Prometheus metrics of the planner service (``slipstream_planner_*``): what each re-plan forecast,
chose and predicted (docs/observability.md lists them)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from .service import ReplanOutput


class PlannerMetrics:
    def __init__(self, pipeline: str, registry: CollectorRegistry) -> None:
        self.pipeline = pipeline
        kw = {"registry": registry}
        self.replans = Counter("slipstream_planner_replans", "Re-plans by outcome: changed (published), "
                               "unchanged, infeasible (no plan meets the SLO; the highest-capacity one published)", ["pipeline", "outcome"], **kw)
        self.forecast = Gauge("slipstream_planner_forecast_requests_per_second", "Forecast peak arrival rate "
                              "planned for", ["pipeline"], **kw)
        self.cost = Gauge("slipstream_planner_cost_dollars_per_hour", "Cost per hour of the latest plan",
                          ["pipeline"], **kw)
        self.p99 = Gauge("slipstream_planner_predicted_p99_seconds", "The estimator's p99 for the latest plan "
                         "(misses counted as late)", ["pipeline"], **kw)
        self.replicas = Gauge("slipstream_planner_replicas", "Replicas of the latest plan per stage",
                              ["pipeline", "stage"], **kw)
        self.infeasible = Gauge("slipstream_planner_infeasible", "1 while no plan meets the SLO and the "
                                "highest-capacity plan is deployed instead (slipstream.planner.fallback), else 0",
                                ["pipeline"], **kw)
        self.shortfall = Gauge("slipstream_planner_shortfall_requests_per_second", "Forecast rate the latest "
                               "plan cannot serve (0 when it has the capacity)", ["pipeline"], **kw)
        self.control_invalid = Counter("slipstream_planner_control_invalid", "Control records skipped as "
                                       "invalid (slipstream.streams.control_rules)", ["pipeline"], **kw)
        for outcome in ("changed", "unchanged", "infeasible"):
            self.replans.labels(pipeline, outcome)
        self.infeasible.labels(pipeline).set(0)
        self.shortfall.labels(pipeline).set(0)

    def observe(self, out: ReplanOutput) -> None:
        p, plan = self.pipeline, out.plan
        outcome = "infeasible" if not plan.feasible else ("changed" if out.changed else "unchanged")
        self.replans.labels(p, outcome).inc()
        self.forecast.labels(p).set(out.forecast_qps)
        self.infeasible.labels(p).set(0 if plan.feasible else 1)
        short = out.forecast_qps - plan.capacity_qps if plan.capacity_qps is not None else 0.0
        self.shortfall.labels(p).set(max(0.0, short))
        if not plan.stages:
            return
        self.cost.labels(p).set(plan.cost_per_hour)
        if plan.predicted_p99_ms is not None:
            self.p99.labels(p).set(plan.predicted_p99_ms / 1e3)
        for s in plan.stages:
            self.replicas.labels(p, s.stage).set(sum(a.replicas for a in s.assignments))
