"""The fault suite on the real broker, two cases short enough for CI: kill -9 of a stage worker and of
the join worker mid-replay. The supervisor restarts each; no request may be left without a result.
(Duplicates and conflicting statuses are reported, not asserted: delivery is at-least-once today.)"""
from __future__ import annotations

import json
from pathlib import Path

from slipstream.chaos import ChaosOptions, run_suite

PIPELINE = Path(__file__).parent / "pipelines" / "fanout3.yaml"


def test_killed_worker_and_join_come_back_and_nothing_is_missing(kafka, tmp_path, monkeypatch):
    monkeypatch.setenv("SLIPSTREAM_BOOTSTRAP", kafka.bootstrap)
    report = tmp_path / "chaos"
    outcomes = run_suite(ChaosOptions(str(PIPELINE), trace="poisson:rate=5,duration=20", fault_at_s=5.0,
                                      only=("kill -9 classify worker", "kill -9 join worker"),
                                      profiles_dir=str(tmp_path / "profiles"), report_dir=str(report),
                                      drain_s=60.0, warmup_s=5.0))
    assert [o.case.target for o in outcomes] == ["classify", "join"]
    for o in outcomes:
        assert o.requests > 50, o.row()
        assert o.missing == 0, o.row()
        assert o.recovery.seconds is not None, o.row()
        assert "SIGKILL" in o.note, o.row()
    rows = json.loads((report / "chaos.json").read_text())["rows"]
    assert [r["missing"] for r in rows] == [0, 0]
    assert (report / "chaos.png").stat().st_size > 0 and (report / "backlog.png").stat().st_size > 0
