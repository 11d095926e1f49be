"""The tuner's share changes in the estimator (``ShareChange``, a loki stage's accuracy scaling): from
their time, windows split by the new shares with the workers' rule (``slipstream.streams.shares.choose``), each
variant at its own latency on the pool's hardware; the replicas stay."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slipstream.planner.estimator import ShareChange, SimOptions, simulate
from slipstream.planner.plan import Assignment
from planner_builders import single_plan
from slipstream.streams import shares

from test_estimator_mixed import FAST, SLOW, problem

SLOW_ONLY = single_plan({"a": [Assignment("slow", "cpu", 4, 1, 1.0, 0.0)]})


@pytest.mark.parametrize("method", ["auto", "events"])
def test_requests_after_a_share_change_run_on_the_variant_their_id_gets(method):
    """One request every 0.1 s, so each one's latency says which variant served it."""
    ids = [f"req-{k:04d}" for k in range(300)]
    mix = {"slow": 0.4, "fast": 0.6}
    changes = (ShareChange(10.0, "a", mix), ShareChange(20.0, "a", {"slow": 1.0, "fast": 0.0}))
    res = simulate(replace(problem(), arrivals_s=np.arange(len(ids)) * 0.1, hop_ms=0.0), SLOW_ONLY,
                   SimOptions(request_ids=ids, schedule=changes, method=method))
    served = [{FAST: "fast", SLOW: "slow"}[round(ms)] for ms in res.latency_ms.tolist()]
    assert served[:100] == ["slow"] * 100 and served[200:] == ["slow"] * 100  # before, and back
    assert served[100:200] == [shares.choose(i, mix) for i in ids[100:200]]
    assert 0.5 < served[100:200].count("fast") / 100 < 0.7


def test_a_share_change_is_checked():
    with pytest.raises(ValueError, match="shares"):
        ShareChange(1.0, "a", {"slow": 0.0})
    with pytest.raises(ValueError, match="ShareChange names no stage"):
        simulate(replace(problem(), arrivals_s=np.arange(10) * 0.1), SLOW_ONLY,
                 SimOptions(schedule=(ShareChange(0.5, "b", {"slow": 1.0}),)))
