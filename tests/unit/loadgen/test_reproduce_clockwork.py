"""Clockwork's goodput-vs-SLO sweep on a small case: early drops never serve less within the SLO."""
from pathlib import Path

import pytest

from slipstream.loadgen.reproduce import clockwork
from slipstream.loadgen.reproduce.clockwork import copies_problem, one_gpu_plan, slo_sweep


@pytest.fixture(scope="module")
def points():
    return slo_sweep([5.0, 20.0, 200.0], copies=3, rate=400.0, seconds=2.0, progress=lambda _: None)


def test_attainment_without_early_drops_is_at_most_with(points):
    by = {(p.slo_ms, p.early_drops): p for p in points}
    for slo in (5.0, 20.0, 200.0):
        assert by[(slo, False)].attainment <= by[(slo, True)].attainment + 1e-9
    # at a tight SLO the GPU wastes its time on doomed requests without early drops
    assert by[(5.0, False)].goodput_rps < 0.8 * by[(5.0, True)].goodput_rps
    assert by[(5.0, False)].dropped == 0 and by[(5.0, True)].dropped > 0


def test_a_loose_slo_serves_the_offered_load(points):
    loose = [p for p in points if p.slo_ms == 200.0]
    assert all(p.attainment > 0.99 for p in loose)


def test_one_gpu_serves_every_copy_in_equal_shares():
    plan = one_gpu_plan(copies_problem(50.0, copies=4))
    sp = plan.stages[0]
    assert sp.replicas == 1 and len(sp.routing) == 4
    assert all(w == pytest.approx(0.25) for w in sp.routing.values())
    assert sp.primary.max_batch == 64 and sp.primary.batch_timeout_ms == 0.0


def test_runs_without_a_data_dir(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(clockwork, "SLOS_MS", (20.0, 500.0))
    monkeypatch.setattr(clockwork, "SECONDS", 1.0)
    result = clockwork.run(None, tmp_path, lambda _: None)
    assert not result.skipped and result.rows and (tmp_path / "clockwork-fig5.png").exists()
