"""Cost and replicas over time, from the control topic's StageConfig records (and tuner ScalingActions).

A stage's cost per hour is the record's ``cost_per_hour`` when the producer filled it in (the planner
writes ``replicas x hardware price`` for the stage), else ``replicas x`` the pipeline's hardware price.
Per stage the highest StageConfig ``epoch`` wins (``slipstream.streams.control_rules.current_records``), so a stale
record read late does not roll the cost back; a ScalingAction changes only the replica count and cost.
The timeline is a step function per stage; its total is integrated exactly over the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..streams.control_rules import current_records

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class ConfigEvent:
    """From ``at_ns`` on, ``stage`` runs ``replicas`` replicas costing ``cost_per_hour`` in all."""

    at_ns: int
    stage: str
    replicas: int
    cost_per_hour: float
    hardware: str = ""
    variant: str = ""


def events_from_records(records: Iterable[tuple[int, Mapping[str, Any]]],
                        prices: Mapping[str, float] | None = None) -> list[ConfigEvent]:
    """``(timestamp_ns, record)`` pairs of StageConfig or ScalingAction dicts -> config events.

    ``prices`` maps hardware name -> price per replica-hour (``Pipeline.hardware``), used when a
    record carries no cost.
    """
    prices = prices or {}
    out: list[ConfigEvent] = []
    current: dict[str, ConfigEvent] = {}
    for at_ns, rec in current_records(records):
        stage = rec["stage"]
        replicas = int(rec["replicas"])
        if "epoch" in rec:  # StageConfig
            hardware, variant = rec.get("hardware", ""), rec.get("variant", "")
        else:  # ScalingAction: keeps the stage's hardware
            prev = current.get(stage)
            hardware, variant = (prev.hardware, prev.variant) if prev else ("", "")
        cost = float(rec.get("cost_per_hour") or 0.0)
        if cost <= 0:
            cost = replicas * float(prices.get(hardware, 0.0))
        ev = ConfigEvent(int(at_ns), stage, replicas, cost, hardware, variant)
        current[stage] = ev
        out.append(ev)
    return out


def step_values(events: Sequence[ConfigEvent], times_ns: np.ndarray, field_name: str,
                stage: str | None = None) -> np.ndarray:
    """Sum over stages (or one stage) of each stage's latest ``field_name`` at each time. Events that
    precede the first time apply from it (a plan published before the run)."""
    t = np.asarray(times_ns, dtype=np.int64)
    total = np.zeros(len(t), dtype=float)
    for s in sorted({e.stage for e in events} if stage is None else {stage}):
        evs = sorted((e for e in events if e.stage == s), key=lambda e: e.at_ns)
        if not evs:
            continue
        at = np.array([e.at_ns for e in evs], dtype=np.int64)
        vals = np.array([getattr(e, field_name) for e in evs], dtype=float)
        idx = np.searchsorted(at, t, side="right") - 1
        # before a stage's first event it is assumed to run its first config (already deployed)
        total += vals[np.maximum(idx, 0)]
    return total


def total_cost_usd(events: Sequence[ConfigEvent], start_ns: int, end_ns: int) -> float:
    """Exact integral of the summed cost step function over ``[start, end]``, in dollars."""
    if end_ns <= start_ns or not events:
        return 0.0
    cuts = sorted({start_ns, end_ns} | {e.at_ns for e in events if start_ns < e.at_ns < end_ns})
    cuts_arr = np.array(cuts, dtype=np.int64)
    rates = step_values(events, cuts_arr[:-1], "cost_per_hour")
    seconds = np.diff(cuts_arr) / NS_PER_S
    return float(np.sum(rates * seconds) / 3600.0)
