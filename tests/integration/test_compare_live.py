"""`slipstream compare-live` on the real broker exits non-zero, naming the mode and why, when a mode
fails (here an unknown mode, so no workers need to start)."""
from __future__ import annotations

import yaml
from click.testing import CliRunner

from slipstream.commands.compare_live import compare_live

from .test_loadgen_replay import RELAY


def test_compare_live_exits_non_zero_when_a_mode_fails(kafka, unique, tmp_path, monkeypatch):
    monkeypatch.setenv("SLIPSTREAM_BOOTSTRAP", kafka.bootstrap)
    path = tmp_path / f"{unique}.yaml"
    path.write_text(yaml.safe_dump({"name": unique, **RELAY}))
    r = CliRunner().invoke(compare_live, ["--pipeline", str(path), "--profiles", str(tmp_path / "profiles"),
                                          "--trace", "poisson:rate=5,duration=4", "--plan-seconds", "2",
                                          "--modes", "nope", "--report", str(tmp_path / "report")])
    assert r.exit_code == 1, r.output
    assert "nope              FAILED: ValueError: mode: expected one of" in r.output
    assert "mode(s) failed:\nnope: ValueError" in r.output


def test_compare_live_serves_a_tuned_mode_and_estimates_it(kafka, unique, tmp_path, monkeypatch):
    # the whole path a user runs: profile, plan, workers, tuner, replay, report, like-for-like and
    # forward estimates (a tuned mode, so the tuner's options and the forward stepping are built too),
    # and a refit on the run that measures the variant the forward prediction had only as profiled
    from slipstream.streams.calibration import CalibrationStore

    monkeypatch.setenv("SLIPSTREAM_BOOTSTRAP", kafka.bootstrap)
    path = tmp_path / f"{unique}.yaml"
    path.write_text(yaml.safe_dump({"name": unique, **RELAY}))
    report = tmp_path / "report"
    r = CliRunner().invoke(compare_live, ["--pipeline", str(path), "--profiles", str(tmp_path / "profiles"),
                                          "--trace", "poisson:rate=5,duration=6", "--plan-seconds", "3",
                                          "--calibrate", "never", "--modes", "milp+tuner", "--report", str(report),
                                          "--refit"])
    assert r.exit_code == 0, r.output
    row = next(line for line in (report / "comparison.txt").read_text().splitlines() if line.startswith("milp+tuner"))
    assert "FAILED" not in row and "%" in row, row
    estimate = (report / "milp+tuner" / "estimate.txt").read_text()
    assert "p99, forward" in estimate and "end-to-end p99 ms" in estimate, estimate
    comparison = (report / "comparison.txt").read_text()
    assert "milp+tuner: pace drawn for variants the calibration did not measure: noop@cpu-1 as profiled" in comparison
    assert f"calibration v1 fitted on {report / 'milp+tuner'}" in r.output, r.output
    measured = CalibrationStore(tmp_path / "profiles").get(1)["service"]["noop@cpu-1"]
    assert measured["samples"] > 0 and "carried_from" not in measured, measured
