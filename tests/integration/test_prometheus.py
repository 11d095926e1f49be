"""A real Prometheus (Debian's ``prometheus`` binary) scrapes a running fan-out pipeline (pre, detect,
classify, join: results come from the sink and from the join) with the committed configuration and
rules of deploy/monitoring; loadgen replays a short trace; the attainment PromQL computes from the
SLO counters equals the attainment of loadgen's report within 1 %. Skips only without the binary."""
from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from slipstream.loadgen.replay import ReplayOptions, ReplayTarget, replay, summarize_outcome
from slipstream.loadgen.schedule import build_schedule
from slipstream.loadgen.traces import load_trace
from slipstream.streams import admin, topics
from slipstream.streams.spec import load_pipeline

from .workers import Workers, unique_pipeline

HERE = Path(__file__).parent
FANOUT3 = HERE / "pipelines" / "fanout3.yaml"
MONITORING = HERE.parents[1] / "deploy" / "monitoring"
PROMETHEUS = shutil.which("prometheus")
STAGES = ("pre", "detect", "classify", "join")
SLO_MS = 60  # tight for four hops on a shared machine: some requests miss, so the ratio is not trivially 1
TRACE = "gamma:rate=40,cv2=4,duration=6"
METRICS = re.compile(r"slipstream-worker ready .* metrics=(\S+)")

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary (apt-get install prometheus)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except urllib.error.URLError as e:  # not listening (yet)
        return 0, str(e.reason)


class Prometheus:
    """The binary on a free loopback port, with deploy/monitoring/prometheus.yml (rules included) made
    fast: 0.5 s scrapes and rule evaluations, the targets file re-read every second."""

    def __init__(self, tmp: Path, targets: list[str]) -> None:
        cfg = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
        cfg["global"].update(scrape_interval="500ms", evaluation_interval="500ms")
        cfg["rule_files"] = [str(MONITORING / f) for f in cfg["rule_files"]]
        (tmp / "targets").mkdir()
        (tmp / "targets" / "workers.json").write_text(json.dumps([{"targets": targets}]))
        job = cfg["scrape_configs"][0]
        job["file_sd_configs"] = [{"files": [str(tmp / "targets" / "*.json")], "refresh_interval": "1s"}]
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = open(tmp / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address={self.url[len('http://'):]}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.job = job["job_name"]

    def until(self, what: str, check, timeout_s: float = 60.0, every_s: float = 0.25):
        """Poll ``check()`` until it returns a value that is not None (Prometheus's own state: its
        readiness, its targets, its samples)."""
        end = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}; see {self.log.name}")
            got = check()
            if got is not None:
                return got
            if time.monotonic() > end:
                raise TimeoutError(f"prometheus: {what} not within {timeout_s:g} s")
            time.sleep(every_s)

    def query(self, expr: str) -> list[dict]:
        status, body = http_get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert status == 200, body
        return json.loads(body)["data"]["result"]

    def scalar(self, expr: str) -> float | None:
        res = self.query(expr)
        return float(res[0]["value"][1]) if res else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def pipeline(kafka, unique, tmp_path):
    path = unique_pipeline(FANOUT3, unique, tmp_path, slo_ms=SLO_MS)
    pipe = load_pipeline(path)
    asyncio.run(admin.ensure_topics(kafka, topics.all_topics(pipe)))
    workers = Workers(path, kafka.bootstrap)
    try:
        workers.start(*STAGES)
        yield pipe, workers
    finally:
        workers.stop()


@pytest.fixture
def prometheus_for(tmp_path):
    started = []

    def start(targets: list[str]) -> Prometheus:
        started.append(Prometheus(tmp_path, targets))
        return started[-1]

    yield start
    for p in started:
        p.stop()


def metrics_addresses(workers: Workers) -> list[str]:
    out = []
    for w in workers.running:
        found = [m.group(1) for line in w.lines if (m := METRICS.search(line))]
        assert found, f"{w.name}: no metrics address in its ready line"
        out.append(found[-1])
    return out


@pytest.mark.timeout(240)
def test_prometheus_attainment_equals_the_loadgen_report(kafka, pipeline, prometheus_for):
    pipe, workers = pipeline
    targets = metrics_addresses(workers)
    for t in targets:  # the endpoints the Kubernetes probes use
        assert http_get(f"http://{t}/healthz") == (200, "ok\n")
        assert http_get(f"http://{t}/readyz") == (200, "ready\n")
    prom = prometheus_for(targets)
    prom.until("ready", lambda: True if http_get(prom.url + "/-/ready")[0] == 200 else None)
    up = f'sum(up{{job="{prom.job}"}})'
    prom.until("every worker scraped", lambda: True if prom.scalar(up) == len(targets) else None)

    schedule = build_schedule(load_trace(TRACE, seed=7), seed=7, rate_scale=1.0)
    target = ReplayTarget(pipe.name, pipe.source, pipe.slo_ms, pipe.input_content_type)
    out = asyncio.run(replay(schedule, target, kafka, b"payload",
                             ReplayOptions(run_id="prometheus", drain_s=30.0)))
    c = out.collector
    assert c.complete and len(c.sent) == len(schedule), c.missing()[:5]
    report = summarize_outcome(out, slo_ms=pipe.slo_ms, pipeline=pipe.name, prices={"cpu-1": 0.05})

    sel = f'{{pipeline="{pipe.name}"}}'
    met, missed = f"sum(slipstream_slo_met_total{sel})", f"sum(slipstream_slo_missed_total{sel})"
    # every result produced (one per request; more only if a worker produced one twice), scraped
    results = len(c.collected()) + c.duplicates
    counted = prom.until(f"{results} results counted",
                         lambda: (lambda n: n if n is not None and n >= results else None)(
                             prom.scalar(f"{met} + {missed}")))
    attainment = prom.scalar(f"{met} / ({met} + {missed})")
    recorded = prom.until("the recording rule", lambda: prom.scalar(
        f"pipeline:slipstream_slo_attainment:ratio_rate5m{sel}"))
    p99 = prom.scalar(f"pipeline:slipstream_request_duration_seconds:p99_rate5m{sel}")
    print(f"\nrequests {len(schedule)}, results counted {counted:.0f} (expected {results}); attainment: "
          f"loadgen {report.attainment:.4f}, prometheus {attainment:.4f} (recorded rate5m {recorded:.4f}); "
          f"p99 of done: loadgen {report.latency.p99_ms:.1f} ms (misses as late), prometheus {p99 * 1e3:.1f} ms; "
          f"drops {report.drops_by_reason}")
    assert counted == results
    assert abs(attainment - report.attainment) <= 0.01
    assert 0.0 <= recorded <= 1.0
    # lag per partition: every stage's input partitions (2 each in fanout3), worked off to 0 once drained
    parts = prom.scalar(f"count(slipstream_consumer_lag_records{sel})")
    assert parts == 2 * len(STAGES), parts
    prom.until("lag back to 0", lambda: True if prom.scalar(
        f"sum(slipstream_consumer_lag_records{sel})") == 0 else None)
    # model info: one variant per model stage (pass, det, small) with its digest label
    models = {r["metric"]["variant"] for r in prom.query(f"slipstream_model_info{sel}")}
    assert models == {"pass", "det", "small"}, models
    assert prom.scalar(f'count(slipstream_build_info{{job="{prom.job}"}})') == len(targets)
