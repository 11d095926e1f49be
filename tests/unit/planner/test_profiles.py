"""Profiler (with a real numpy executor), the profile store, CSV import, problems from a pipeline."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from slipstream.planner.profiler import ProfilerSettings, measure_batch, profile_variant
from slipstream.planner.profiles import (FORMAT_VERSION, BatchPoint, Profile, ProfileError, ProfileStore, import_csv,
                              problem_from_pipeline)
from slipstream.streams.executor import Emit, ItemOutput
from slipstream.streams.spec import Hardware, Variant, parse_pipeline
from tests.paths import RESEARCH_DATA

PUBLISHED = RESEARCH_DATA / "UMass-LIDS+Loki" / "aggregate_profiled.csv"


class MatmulExecutor:
    """Real work: one (64 x 64) @ (64 x 64 * batch) matmul per batch, so latency grows with batch."""

    device = "cpu"

    def __init__(self, variant: Variant, hardware: Hardware) -> None:
        self.variant = variant.name
        self.rng = np.random.default_rng(0)
        self.a = self.rng.random((64, 64))
        self.closed = False

    def run(self, payloads):
        b = self.rng.random((64, 64 * len(payloads)))
        out = self.a @ b
        return [ItemOutput((Emit(out[:1, :1].tobytes(), "application/octet-stream"),)) for _ in payloads]

    def example_payload(self) -> bytes:
        return b"x"

    def close(self) -> None:
        self.closed = True


def fake_clock(step_ns_per_call: list[int]):
    """A clock that advances by the next step on every other call (start/stop pairs)."""
    state = {"t": 0, "i": 0, "k": 0}

    def now() -> int:
        if state["k"] % 2 == 1:
            state["t"] += step_ns_per_call[state["i"] % len(step_ns_per_call)]
            state["i"] += 1
        state["k"] += 1
        return state["t"]
    return now


def test_measure_batch_keeps_p50_p99_from_the_clock():
    ex = MatmulExecutor(Variant("m", "m", 0.5), Hardware("cpu-1", "cpu", 0.1))
    clock = fake_clock([1_000_000] * 99 + [9_000_000])  # 99 runs of 1 ms, one of 9 ms
    pt = measure_batch(ex, 4, ProfilerSettings((4,), warmup=2, reps=100), clock)
    assert pt.p50_ms == pytest.approx(1.0)
    assert 1.0 < pt.p99_ms <= 9.0
    assert pt.reps == 100


def test_profile_variant_measures_real_work_and_closes(tmp_path):
    made = []

    def factory(v, h):
        made.append(MatmulExecutor(v, h))
        return made[-1]
    ticks = []
    prof = profile_variant(Variant("m", "m", 0.5), Hardware("cpu-2", "cpu", 0.1, threads=2), factory,
                           ProfilerSettings((1, 8, 64), warmup=2, reps=15), progress=ticks.append)
    assert made[0].closed and len(ticks) == 3
    assert set(prof.points) == {1, 8, 64}
    assert prof.points[64].p50_ms > prof.points[1].p50_ms  # 64x the flops
    assert prof.machine["threads"] == 2 and prof.machine["device"] == "cpu"
    store = ProfileStore(tmp_path)
    path = store.save(prof)
    assert json.loads(path.read_text())["format"] == FORMAT_VERSION
    back = store.get("m", "cpu-2")
    assert back.points == prof.points and back.curve().ms(64) == pytest.approx(prof.points[64].p99_ms)


def test_store_rejects_other_format_versions(tmp_path):
    store = ProfileStore(tmp_path)
    p = store.save(Profile("m", "cpu", {1: BatchPoint(1.0, 2.0, 10)}))
    doc = json.loads(p.read_text())
    doc["format"] = 99
    p.write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match="format"):
        store.get("m", "cpu")


CSV = """Model,Accel,Trials,batchsize,50th_pct,90th_pct,avg_latency(ms),Min,Max,Accuracy,Normalized_Accuracy
resnet50,onnxruntime_cpu,100,1,20.0,22.0,21,19,30,76.1,97
resnet50,onnxruntime_cpu,100,2,35.0,38.0,36,33,50,76.1,97
resnet50,onnxruntime_gpu_ampere,100,1,3.0,3.5,3.1,2.9,9,76.1,97
resnet50,onnxruntime_gpu_ampere,100,8,6.0,6.6,6.1,5.9,12,76.1,97
"""


def test_import_csv_uses_p90_and_accuracy(tmp_path):
    src = tmp_path / "table.csv"
    src.write_text(CSV)
    store = ProfileStore(tmp_path / "store")
    profs = import_csv(src, store)
    assert {(p.variant, p.hardware) for p in profs} == {("resnet50", "onnxruntime-cpu"),
                                                         ("resnet50", "onnxruntime-gpu-ampere")}
    gpu = store.get("resnet50", "onnxruntime-gpu-ampere")
    assert gpu.percentile == "p90" and gpu.curve().ms(8) == pytest.approx(6.6)
    assert gpu.accuracy == pytest.approx(0.761)
    assert gpu.source.startswith("imported:")


def test_import_rejects_other_layouts(tmp_path):
    src = tmp_path / "t.csv"
    src.write_text("a,b\n1,2\n")
    with pytest.raises(ProfileError, match="missing columns"):
        import_csv(src, ProfileStore(tmp_path / "s"))


@pytest.mark.skipif(not PUBLISHED.exists(), reason="published Loki profile table not present")
def test_import_published_loki_table(tmp_path):
    profs = import_csv(PUBLISHED, ProfileStore(tmp_path))
    hws = {p.hardware for p in profs}
    assert {"onnxruntime-cpu", "onnxruntime-gpu-pascal", "onnxruntime-gpu-ampere"} <= hws
    for p in profs:
        curve = p.curve()
        assert curve.ms(max(p.points)) >= curve.ms(1) * 0.5


def test_problem_from_pipeline_and_profiles(tmp_path):
    pipe = parse_pipeline({
        "name": "two", "slo_ms": 300,
        "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05},
                     "gpu": {"kind": "cuda", "cost_per_hour": 1.0}},
        "stages": [{"name": "det", "variants": [{"name": "d", "model": "m-d", "accuracy": 0.7}]},
                   {"name": "cls", "variants": [{"name": "c", "model": "m-c", "accuracy": 0.8}]}],
        "edges": [{"from": "det", "to": "cls", "fanout": 2.0}]})
    store = ProfileStore(tmp_path)
    store.save(Profile("d", "cpu-1", {1: BatchPoint(5, 6), 4: BatchPoint(12, 14)}))
    store.save(Profile("m-c", "gpu", {1: BatchPoint(1, 2), 8: BatchPoint(3, 4)}))  # found by model name
    p = problem_from_pipeline(pipe, store, rate_qps=40, sim_seconds=10)
    assert p.rate_qps == 40 and p.visit_ratio("cls") == 2.0
    assert set(p.stage("det").variant("d").latency) == {"cpu-1"}
    assert set(p.stage("cls").variant("c").latency) == {"gpu"}
    store2 = ProfileStore(tmp_path / "empty")
    with pytest.raises(ProfileError, match="no profile"):
        problem_from_pipeline(pipe, store2, rate_qps=10)


def test_a_host_with_fewer_cores_plans_no_cpu_hardware_wider_than_them(tmp_path):
    pipe = parse_pipeline({
        "name": "one", "slo_ms": 300,
        "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05},
                     "cpu-2": {"kind": "cpu", "threads": 2, "cost_per_hour": 0.10},
                     "gpu": {"kind": "cuda", "cost_per_hour": 1.0}},
        "stages": [{"name": "cls", "variants": [{"name": "c", "model": "m-c", "accuracy": 0.8}]}]})
    store = ProfileStore(tmp_path)
    for hw in ("cpu-1", "cpu-2", "gpu"):
        store.save(Profile("c", hw, {1: BatchPoint(5, 6), 4: BatchPoint(12, 14)}))
    wide = problem_from_pipeline(pipe, store, rate_qps=10, sim_seconds=10, cores=2)
    assert set(wide.stage("cls").variant("c").latency) == {"cpu-1", "cpu-2", "gpu"}
    narrow = problem_from_pipeline(pipe, store, rate_qps=10, sim_seconds=10, cores=1)
    assert set(narrow.stage("cls").variant("c").latency) == {"cpu-1", "gpu"}  # a GPU is no core
    assert set(narrow.hardware) == {"cpu-1", "gpu"}
    store1 = ProfileStore(tmp_path / "wide-only")
    store1.save(Profile("c", "cpu-2", {1: BatchPoint(5, 6)}))
    with pytest.raises(ProfileError, match=r"no profile .* on hardware \['cpu-1', 'gpu'\]"):
        problem_from_pipeline(pipe, store1, rate_qps=10, cores=1)
