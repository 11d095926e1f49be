"""The tuner policy stepped over an arrival trace, as the tuner service steps it (shared by the policy
tests)."""
from __future__ import annotations

import numpy as np

from slipstream.tuner.envelope import NS_PER_S, EnvelopeTracker
from slipstream.tuner.policy import TunerConfig, TunerPlan, TunerState, decide, observe, tracker_windows


def run_flow(plan: TunerPlan, arrivals_s: np.ndarray, until_s: float, config: TunerConfig,
             every_s: float = 0.5) -> list[tuple[float, dict[str, int], object]]:
    """Feed arrivals up to each decision time into a live tracker and decide; return the history
    (time s, targets, decision)."""
    tracker = EnvelopeTracker(tracker_windows(plan, config), recent_horizon_s=config.down_horizon_s + 1)
    state = TunerState.initial(plan, 0)
    ns = np.round(np.sort(arrivals_s) * NS_PER_S).astype(np.int64)
    fed, history = 0, []
    for k in range(1, int(until_s / every_s) + 1):
        now = int(k * every_s * NS_PER_S)
        upto = int(np.searchsorted(ns, now, side="right"))
        tracker.add(ns[fed:upto])
        fed = upto
        decision, state = decide(observe(tracker, plan, now, config), plan, state, now, config)
        history.append((now / NS_PER_S, dict(decision.targets), decision))
    return history
