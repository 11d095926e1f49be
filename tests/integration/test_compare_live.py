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
