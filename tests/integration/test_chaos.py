"""The fault suite (``slipstream chaos``) under exactly-once processing, every case, on a Kafka of the
test's own (on other ports than the shared broker's, since the broker cases kill it): kill -9 of every
stage worker, the join, the tuner and the planner service, SIGSTOP of the source worker past its
session timeout, and kill -9 of the broker (restarted after a few seconds). The supervisor restarts
each process. Every case: no request left without a result, none answered twice, none with two
statuses (the results topic read committed).

The same on a local three-broker cluster of the test's own (workers, consumer groups and
transactions on it, the broker leading most partitions killed mid-replay and restarted). Both run in
``make test`` (CI); ``make faults`` runs these two alone (no shared broker needed).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slipstream.loadgen.faults.chaos_run import ChaosOptions, run_suite
from slipstream.streams import broker
from slipstream.streams.config import EXACTLY_ONCE

PIPELINE = Path(__file__).parent / "pipelines" / "fanout3.yaml"
OWN_PORT, OWN_CLUSTER_PORT = 19200, 19210  # apart from the shared broker (19092) and `kafka up --brokers 3` (19094..)


def run_eos(tmp_path: Path, monkeypatch, brokers: int, port: int, **kw):
    monkeypatch.setenv("SLIPSTREAM_PROCESSING", EXACTLY_ONCE)
    monkeypatch.delenv("SLIPSTREAM_BOOTSTRAP", raising=False)
    state = tmp_path / "kafka"
    t0 = time.monotonic()
    try:
        outcomes = run_suite(ChaosOptions(str(PIPELINE), profiles_dir=str(tmp_path / "profiles"),
                                          report_dir=str(tmp_path / "chaos"), brokers=brokers, port=port,
                                          kafka_state=str(state), **kw))
    finally:  # the run stops the Kafka it started; this only makes sure of it when the run failed early
        if brokers > 1:
            broker.cluster_down(broker.local_cluster(brokers, port=port, state=state), progress=lambda _: None)
        else:
            broker.down(broker.default_broker(state, port), progress=lambda _: None)
    print(f"{len(outcomes)} case(s) in {time.monotonic() - t0:.0f} s")
    return outcomes


def assert_exactly_once(outcomes, report: Path) -> None:
    for o in outcomes:
        assert o.requests > 30, o.row()
        assert (o.missing, o.duplicates, o.conflicting) == (0, 0, 0), o.row()
        assert o.recovery.seconds is not None, o.row()
        assert not o.note.startswith("skipped"), o.row()
    rows = json.loads((report / "chaos.json").read_text())["rows"]
    assert [(r["missing"], r["duplicates"], r["conflicting"]) for r in rows] == [(0, 0, 0)] * len(outcomes)
    assert (report / "chaos.png").stat().st_size > 0 and (report / "backlog.png").stat().st_size > 0


@pytest.mark.timeout(1800)
def test_every_fault_case_ends_each_request_exactly_once(tmp_path, monkeypatch):
    outcomes = run_eos(tmp_path, monkeypatch, 1, OWN_PORT, trace="poisson:rate=5,duration=16", fault_at_s=4.0,
                       freeze_s=12.0, broker_down_s=3.0, drain_s=60.0, warmup_s=4.0, replan_s=30.0)
    names = [o.case.name for o in outcomes]
    assert len(names) == 9 and names[0] == "baseline (no fault)", names
    for target in ("pre", "detect", "classify", "join", "tuner", "planner"):
        assert any(f"kill -9 {target}" in n for n in names), names
    assert any(n.startswith("SIGSTOP") for n in names) and any("the broker" in n for n in names), names
    for o in outcomes[1:]:  # every fault was injected (a process by its pid, or the broker)
        assert "SIG" in o.note, o.row()
    assert_exactly_once(outcomes, tmp_path / "chaos")


@pytest.mark.timeout(1200)
def test_one_broker_of_three_killed_mid_replay_ends_each_request_exactly_once(tmp_path, monkeypatch):
    outcomes = run_eos(tmp_path, monkeypatch, 3, OWN_CLUSTER_PORT, trace="poisson:rate=5,duration=20",
                       fault_at_s=5.0, broker_down_s=5.0, drain_s=90.0, warmup_s=4.0, only=("baseline", "broker"))
    assert [o.case.name for o in outcomes] == ["baseline (no fault)", "kill -9 1 broker of 3, back after 5 s"]
    assert "SIGKILL broker node" in outcomes[1].note, outcomes[1].row()
    assert_exactly_once(outcomes, tmp_path / "chaos")
