"""Prometheus metrics of the tuner (``slipstream_tuner_*``): what each decision saw and what it did,
and what the pipeline costs (docs/observability.md lists them)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..schemas.records import StageConfig
from .policy import LiveTraffic, ScaleDecision, TunerPlan


class TunerMetrics:
    def __init__(self, pipeline: str, registry: CollectorRegistry | None = None) -> None:
        self.pipeline = pipeline
        kw = {"registry": registry} if registry is not None else {}
        self.arrivals = Counter("slipstream_tuner_arrivals", "Arrival timestamps counted", ["pipeline"], **kw)
        self.late = Counter("slipstream_tuner_late_arrivals", "Arrivals older than the reorder hold-back",
                            ["pipeline"], **kw)
        self.live_rate = Gauge("slipstream_tuner_live_rate_requests_per_second", "Live envelope rate per window (scale-up view)",
                               ["pipeline", "window_s"], **kw)
        self.planned_rate = Gauge("slipstream_tuner_planned_rate_requests_per_second", "Planned (sample) envelope rate per window",
                                  ["pipeline", "window_s"], **kw)
        self.down_rate = Gauge("slipstream_tuner_down_rate_requests_per_second", "Peak 5 s rate over the last 30 s",
                               ["pipeline"], **kw)
        self.pace = Gauge("slipstream_tuner_pace", "Each stage's batch service time against the plan's "
                          "(slipstream.tuner.pace): its capacity is divided by it", ["pipeline", "stage"], **kw)
        self.replicas = Gauge("slipstream_tuner_replicas", "Replicas the tuner wants per stage",
                              ["pipeline", "stage"], **kw)
        self.short = Gauge("slipstream_tuner_replicas_short", "Replicas the live envelope asks beyond the "
                           "most the tuner may run (max_replicas; 0: none short)", ["pipeline", "stage"], **kw)
        self.share = Gauge("slipstream_tuner_routing_share", "Share of a stage's items routed to a variant "
                           "(stages with a ladder: the tuner's accuracy scaling, slipstream.tuner.ladder)",
                           ["pipeline", "stage", "variant"], **kw)
        self.partitions = Gauge("slipstream_tuner_partitions", "Partitions of the stage input topic",
                                ["pipeline", "stage"], **kw)
        self.actions = Counter("slipstream_tuner_scaling_actions", "Scaling actions taken",
                               ["pipeline", "stage", "direction"], **kw)
        self.cost = Gauge("slipstream_tuner_cost_dollars_per_hour", "Cost per hour of each stage's replicas "
                          "(the latest StageConfig on the control topic)", ["pipeline", "stage"], **kw)
        self.control_invalid = Counter("slipstream_tuner_control_invalid", "Control records skipped as "
                                       "invalid (slipstream.streams.control_rules)", ["pipeline"], **kw)
        self.group_lag = Gauge("slipstream_group_lag_records", "Records of a worker role's input topic its "
                               "consumer group has not committed, read from the broker by the tuner "
                               "(known while the role has no pods)", ["pipeline", "stage"], **kw)
        self.decide_seconds = Histogram("slipstream_tuner_decide_seconds", "Run time of one decision",
                                        ["pipeline"], buckets=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2),
                                        **kw)

    def observe_config(self, record: StageConfig) -> None:
        """A StageConfig read from the control topic (the planner's or the tuner's own)."""
        if record.pipeline == self.pipeline and record.cost_per_hour is not None:
            self.cost.labels(self.pipeline, record.stage).set(float(record.cost_per_hour))

    def observe_plan(self, plan: TunerPlan) -> None:
        for w, r in zip(plan.envelope.windows_s, plan.envelope.rates_qps):
            self.planned_rate.labels(self.pipeline, f"{w:g}").set(r)
        for s in plan.stages:
            self.observe_shares(s.stage, s.planned_shares)

    def observe_shares(self, stage: str, shares) -> None:
        for variant, f in shares.items():
            self.share.labels(self.pipeline, stage, variant).set(f)

    def observe_decision(self, live: LiveTraffic, decision: ScaleDecision, seconds: float,
                         arrivals: int, late: int) -> None:
        p = self.pipeline
        for w, r in zip(live.envelope.windows_s, live.envelope.rates_qps):
            self.live_rate.labels(p, f"{w:g}").set(r)
        self.down_rate.labels(p).set(live.down_rate_qps)
        for stage, n in decision.targets.items():
            self.replicas.labels(p, stage).set(n)
            self.short.labels(p, stage).set(max(0, decision.short.get(stage, n) - n))
            self.pace.labels(p, stage).set(live.pace.get(stage, 1.0))
        for c in decision.changes:
            self.actions.labels(p, c.stage, "up" if c.replicas > c.previous else "down").inc()
        for sc in decision.share_changes:
            self.observe_shares(sc.stage, sc.shares)
        self.decide_seconds.labels(p).observe(seconds)
        if arrivals:
            self.arrivals.labels(p).inc(arrivals)
        if late:
            self.late.labels(p).inc(late)
