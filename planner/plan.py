"""Plans (what every planner mode returns) and the analytical model they are all judged by.

A :class:`Plan` gives each stage one or more :class:`Assignment` s: (variant, hardware, max batch,
replicas, routing weight, batch timeout). One assignment per stage is the usual case; Loki plans and
mixed MILP plans (INFaaS's "2B + 1C") have several, each solved as a separate replica group that gets
its ``weight`` share of the stage's items. Deployed, a mixed stage is one pool instead: the stage's
total replicas on the primary assignment's hardware and batching, every variant of ``routing``
loaded in each (``slipstream.planner.service.stage_configs``); the estimator simulates that pool.

The analytical model (IPA's, stated in docs/planner.md and used exactly by ``slipstream.planner.milp``):

- stage rate  lambda_s = lambda x visit_ratio(s)  (product of fanout x probability along paths)
- config latency  l(b) + (b - 1) / lambda_s   (batch execution + IPA's batch-formation time)
- a stage's latency is the largest latency among the configs it uses; every source-to-sink path's
  sum is at most the SLO
- capacity  sum over configs of replicas x b / l(b) >= lambda_s
- cost  sum of replicas x hardware price per hour

Batch timeout (documented choice): ``min((b - 1) / lambda_s, l(b))``: the expected time a batch
of b takes to form at the stage rate, capped at one batch execution (under load the next batch
forms while the current one runs, so waiting longer buys nothing). It never exceeds the
formation term of the analytical latency, so the model stays an upper bound on the wait.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from .problem import Problem


@dataclass(frozen=True)
class Assignment:
    variant: str
    hardware: str
    max_batch: int
    replicas: int
    weight: float = 1.0  # share of the stage's items routed to this replica group
    batch_timeout_ms: float = 0.0


@dataclass(frozen=True)
class StagePlan:
    """One stage's planned configuration: its assignments and partitions. The deployed form is one
    ``StageConfig`` record per stage (``slipstream.planner.service.stage_configs``); the tuner's view
    of the same plan is ``slipstream.tuner.policy.StageSizing`` (from the TunerHandoff record)."""

    stage: str
    assignments: tuple[Assignment, ...]
    partitions: int = 4

    @property
    def replicas(self) -> int:
        return sum(a.replicas for a in self.assignments)

    @property
    def primary(self) -> Assignment:
        return max(self.assignments, key=lambda a: (a.weight, a.replicas))

    @property
    def routing(self) -> dict[str, float]:
        """The deployed config's ``routing``: each variant's share (its assignments' weights summed);
        {} for one assignment."""
        out: dict[str, float] = {}
        if len(self.assignments) > 1:
            for a in self.assignments:
                out[a.variant] = out.get(a.variant, 0.0) + a.weight
        return out


@dataclass(frozen=True)
class Round:
    """One solve-and-check round of a validated plan."""

    budget_ms: float
    rate_qps: float
    cost_per_hour: float
    predicted_p99_ms: float | None
    attainment: float | None
    feasible: bool


@dataclass(frozen=True)
class Plan:
    mode: str
    stages: tuple[StagePlan, ...]
    feasible: bool
    reason: str = ""
    cost_per_hour: float = 0.0
    accuracy: float = 0.0  # expected pipeline accuracy: mean over paths of the product of accuracies
    analytic_latency_ms: float = 0.0  # longest path of the analytical latency
    solve_time_s: float = 0.0
    predicted_p99_ms: float | None = None  # from the estimator (None when not validated)
    attainment: float | None = None  # fraction of sample requests finished within the SLO
    rounds: tuple[Round, ...] = ()
    notes: tuple[str, ...] = ()  # binding constraints, runner-up, solver status
    rate_qps: float = 0.0  # the planning rate this plan was sized for
    capacity_qps: float | None = None  # an infeasible plan deployed anyway: what it serves (slipstream.planner.fallback)

    def stage(self, name: str) -> StagePlan:
        for s in self.stages:
            if s.stage == name:
                return s
        raise KeyError(name)

    def p99_text(self) -> str:
        """The estimator's p99 for printing: "not validated" when it did not run (or no plan met the SLO)."""
        return "not validated" if self.predicted_p99_ms is None else f"{self.predicted_p99_ms:.1f} ms"

    def hardware_of(self) -> dict[tuple[str, str], str]:
        """(stage, variant) -> the hardware its assignment runs it on."""
        return {(sp.stage, a.variant): a.hardware for sp in self.stages for a in sp.assignments}

    def key(self) -> tuple:
        """What identifies the deployed configuration (used to decide whether a plan changed)."""
        return tuple((s.stage, tuple((a.variant, a.hardware, a.max_batch, a.replicas,
                                      round(a.weight, 3)) for a in s.assignments))
                     for s in self.stages)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "feasible": self.feasible, "reason": self.reason,
            "cost_per_hour": self.cost_per_hour, "accuracy": self.accuracy,
            "analytic_latency_ms": self.analytic_latency_ms, "predicted_p99_ms": self.predicted_p99_ms,
            "attainment": self.attainment, "solve_time_s": self.solve_time_s, "rate_qps": self.rate_qps,
            "capacity_qps": self.capacity_qps,
            "stages": [{"stage": s.stage, "partitions": s.partitions,
                        "assignments": [a.__dict__.copy() for a in s.assignments]} for s in self.stages],
            "rounds": [r.__dict__.copy() for r in self.rounds],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Plan":
        """The plan :meth:`to_dict` wrote (e.g. a report's ``plan.json``)."""
        stages = tuple(StagePlan(s["stage"], tuple(Assignment(**a) for a in s["assignments"]), s.get("partitions", 4))
                       for s in d["stages"])
        rest = {k: d[k] for k in ("reason", "cost_per_hour", "accuracy", "analytic_latency_ms", "predicted_p99_ms",
                                  "attainment", "solve_time_s", "rate_qps", "capacity_qps") if k in d}
        return cls(d["mode"], stages, d["feasible"], rounds=tuple(Round(**r) for r in d.get("rounds", ())),
                   notes=tuple(d.get("notes", ())), **rest)


def infeasible(mode: str, reason: str, *, solve_time_s: float = 0.0, notes: tuple[str, ...] = (),
               rate_qps: float = 0.0) -> Plan:
    return Plan(mode=mode, stages=(), feasible=False, reason=reason, solve_time_s=solve_time_s,
                notes=notes, rate_qps=rate_qps)


# ----------------------------------------------------------------------------------------------
# The analytical model


@dataclass(frozen=True)
class Config:
    """One (stage, variant, hardware, batch) choice with its analytical numbers at a stage rate."""

    stage: str
    variant: str
    hardware: str
    batch: int
    exec_ms: float  # l(b)
    form_ms: float  # (b - 1) / lambda_s
    throughput_qps: float  # b / l(b), one replica
    accuracy: float
    price: float
    host_cores: int = 0  # cores of the host a replica keeps busy while it runs (HardwareOption.host_cores)

    @property
    def cpu_ms_per_item(self) -> float:
        """Host CPU time one item takes: the batch's run on its cores, shared by its items."""
        return self.host_cores * self.exec_ms / self.batch

    @property
    def latency_ms(self) -> float:
        return self.exec_ms + self.form_ms

    @property
    def timeout_ms(self) -> float:
        return min(self.form_ms, self.exec_ms)

    def replicas_for(self, rate_qps: float) -> int:
        return max(1, math.ceil(rate_qps / self.throughput_qps - 1e-9))


def formation_ms(batch: int, rate_qps: float) -> float:
    if batch <= 1:
        return 0.0
    if rate_qps <= 0:
        return math.inf
    return (batch - 1) / rate_qps * 1000.0


def stage_configs(problem: Problem, stage: str, rate_qps: float | None = None,
                  variants: set[str] | None = None) -> list[Config]:
    """Every config of a stage at the planning rate (or ``rate_qps``), in a stable order, on the
    hardware that fits the host (``Problem.fits_host``)."""
    lam = problem.stage_rate(stage, rate_qps)
    out = []
    for v in problem.stage(stage).variants:
        if variants is not None and v.name not in variants:
            continue
        for hname in sorted(v.latency):
            if not problem.fits_host(hname):
                continue
            curve = v.latency[hname]
            for b in problem.batch_sizes_for(curve):
                form = formation_ms(b, lam)
                if math.isinf(form):
                    continue
                hw = problem.hardware[hname]
                out.append(Config(stage, v.name, hname, b, curve.ms(b), form, curve.throughput_qps(b),
                                  v.accuracy, hw.cost_per_hour, hw.host_cores))
    return out


def assignment_for(config: Config, replicas: int, weight: float = 1.0) -> Assignment:
    return Assignment(config.variant, config.hardware, config.batch, replicas, weight, config.timeout_ms)


def config_of(problem: Problem, stage: str, a: Assignment, rate_qps: float | None = None) -> Config:
    lam = problem.stage_rate(stage, rate_qps)
    v = problem.stage(stage).variant(a.variant)
    curve = v.latency[a.hardware]
    hw = problem.hardware[a.hardware]
    return Config(stage, a.variant, a.hardware, a.max_batch, curve.ms(a.max_batch),
                  formation_ms(a.max_batch, lam) if lam > 0 else 0.0, curve.throughput_qps(a.max_batch),
                  v.accuracy, hw.cost_per_hour, hw.host_cores)


def partitions_for(problem: Problem, replicas: int) -> int:
    """Partitions of a stage topic: the smallest multiple of the replica count that is at least
    ``min_partitions``, so the range assignor gives every replica the same number of partitions."""
    r = max(1, replicas)
    return r * max(1, math.ceil(problem.min_partitions / r))


def evaluate(problem: Problem, mode: str, stages: Mapping[str, tuple[Assignment, ...]], *,
             rate_qps: float | None = None, solve_time_s: float = 0.0,
             notes: tuple[str, ...] = ()) -> Plan:
    """Build a :class:`Plan` with cost, accuracy and analytical latency filled in from the model."""
    rate = problem.rate_qps if rate_qps is None else rate_qps
    cost = 0.0
    stage_lat: dict[str, float] = {}
    stage_acc: dict[str, float] = {}
    plans = []
    for s in problem.topo_order:
        assigns = stages[s]
        lat, acc = 0.0, 0.0
        wsum = sum(a.weight for a in assigns) or 1.0
        for a in assigns:
            c = config_of(problem, s, a, rate)
            cost += a.replicas * c.price
            lat = max(lat, c.latency_ms)
            acc += a.weight / wsum * c.accuracy
        stage_lat[s] = lat
        stage_acc[s] = acc
        plans.append(StagePlan(s, tuple(assigns), partitions_for(problem, sum(a.replicas for a in assigns))))
    paths = problem.paths()
    longest = max(sum(stage_lat[s] for s in p) for p in paths)
    accuracy = sum(math.prod(stage_acc[s] for s in p) for p in paths) / len(paths)
    return Plan(mode=mode, stages=tuple(plans), feasible=True, cost_per_hour=cost, accuracy=accuracy,
                analytic_latency_ms=longest, solve_time_s=solve_time_s, notes=notes, rate_qps=rate)
