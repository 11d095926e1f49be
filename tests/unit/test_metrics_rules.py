"""deploy/monitoring: promtool checks the rules, the config and the rules' own tests, and every metric
the dashboard and the rules read is one the code exports (a renamed metric fails here)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slipstream.agents.metrics import StageMetrics
from slipstream.gateway.metrics import GatewayMetrics
from slipstream.planner.metrics import PlannerMetrics

from slipstream.tuner.metrics import TunerMetrics

MON = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian: prometheus)")
NAME = re.compile(r"(?<![\w:])(slipstream_[a-z0-9_]+|up)(?![\w:])")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",), "info": ("_info",)}


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=MON, capture_output=True, text=True, timeout=60)


@needs_promtool
@pytest.mark.parametrize("args", [("check", "rules", "rules.yaml"), ("test", "rules", "rules-test.yaml"),
                                  ("check", "config", "prometheus.yml")])
def test_promtool(args):
    out = promtool(*args)
    assert out.returncode == 0, out.stdout + out.stderr


def exported() -> set[str]:
    """Every sample name the workers, the tuner, the planner and the gateway export (not the process
    collectors)."""
    regs = [StageMetrics.create("p", "s", 100.0).registry, CollectorRegistry(), CollectorRegistry(),
            GatewayMetrics.create("p").registry]
    TunerMetrics("p", regs[1])
    PlannerMetrics("p", regs[2])
    return {f.name + s for r in regs for f in r.collect() for s in SUFFIXES.get(f.type, ("",))} | {"up"}


def used() -> set[str]:
    dash = json.loads((MON / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [dash["templating"]["list"][1]["definition"]]
    return set(NAME.findall("\n".join(exprs) + (MON / "rules.yaml").read_text()))


def test_dashboard_and_rules_read_exported_metrics():
    missing = used() - exported()
    assert not missing, f"read by the dashboard or rules but exported by nothing: {sorted(missing)}"


def test_dashboard_reads_recorded_series():
    rules = (MON / "rules.yaml").read_text()
    dash = (MON / "grafana-dashboard.json").read_text()
    recorded = set(re.findall(r"record: (\S+)", rules))
    read = set(re.findall(r"[a-z_]+:slipstream_[a-z0-9_]+:[a-z0-9_]+", dash))
    assert read and read <= recorded, sorted(read - recorded)
