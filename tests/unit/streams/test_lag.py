"""Consumer lag from the broker's offsets (streams/lag.py): end minus committed, per group."""
from slipstream.streams.lag import group_lag, stage_groups
from slipstream.streams.spec import parse_pipeline

import yaml


def test_group_lag_is_end_minus_committed_over_every_partition():
    ends = {"t0": 10, "t1": 7, "t2": 5}
    assert group_lag(ends, {"t0": 4, "t1": 7, "t2": 5}) == 6
    assert group_lag(ends, {"t0": 4}) == 6 + 7 + 5  # nothing committed: all of it
    assert group_lag(ends, {"t0": 4}, starts={"t1": 3, "t2": 5}) == 6 + 4  # from the log's start
    assert group_lag(ends, {"t0": 12, "t1": 7, "t2": 5}) == 0  # never negative
    assert group_lag({}, {"t0": 1}) == 0


def test_stage_groups_name_every_worker_role_and_its_input():
    pipe = parse_pipeline(yaml.safe_load("""
name: p
slo_ms: 100
hardware: {cpu-1: {kind: cpu, threads: 1, cost_per_hour: 0.05}}
stages:
  - {name: a, variants: [{name: v, model: noop, accuracy: 1.0}]}
  - {name: b, variants: [{name: v, model: noop, accuracy: 1.0}]}
  - {name: c, variants: [{name: v, model: noop, accuracy: 1.0}]}
edges: [{from: a, to: b}, {from: a, to: c}]
"""))
    groups = stage_groups(pipe)
    assert sorted(g.rsplit("-", 1)[1] for g in groups) == ["a", "b", "c", "join"]
    assert all(t.endswith(".in") for g, t in groups.items() if not g.endswith("join"))
