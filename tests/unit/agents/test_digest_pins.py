"""Model digest pins: a variant pinned to a digest (``params.digest`` in the spec, ``StageConfig.digests``
on the control topic) is served only by that model; any other is refused with both digests named, and a
refused StageConfig leaves the config in force (logged, counted in ``slipstream_config_rejected``)."""
from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest
import yaml

from slipstream.agents import zoo
from slipstream.agents.control import accept, defaults
from slipstream.agents.executors import DigestMismatch, check_digest, pinned
from slipstream.agents.metrics import StageMetrics
from slipstream.agents.worker import StageWorker
from slipstream.schemas.records import StageConfig
from slipstream.streams.config import KafkaSettings
from slipstream.streams.executor import Emit, ItemOutput
from slipstream.streams.spec import Hardware, Variant, load_pipeline
from tests.unit.agents.test_onnx_kind import linear_onnx
from tests.control_records import stage_config

CPU = Hardware("cpu-1", "cpu", 0.0, 1)


class Fake:
    """An executor whose digest is what the test says."""

    device = "cpu"

    def __init__(self, variant: str, digest: str) -> None:
        self.variant, self.digest, self.closed = variant, digest, False

    def run(self, payloads):
        return [ItemOutput((Emit(bytes(p), "t"),)) for p in payloads]

    def example_payload(self) -> bytes:
        return b"x"

    def close(self) -> None:
        self.closed = True


def test_a_pin_matches_the_short_digest_or_the_full_sha256_it_starts():
    ex = Fake("a", "0123456789ab")
    check_digest(ex, "", "nobody")  # no pin
    check_digest(ex, "0123456789ab", "x")
    check_digest(ex, "0123456789AB" + "f" * 52, "x")
    with pytest.raises(DigestMismatch, match=r"variant 'a' loaded model digest '0123456789ab', but the "
                                             r"StageConfig pins 'ffffffffffff'"):
        check_digest(ex, "ffffffffffff", "the StageConfig")
    with pytest.raises(DigestMismatch, match=r"'\(none\)'"):  # a model-free stage has no model to pin
        check_digest(Fake("a", ""), "0123456789ab", "x")


def test_a_pinned_factory_closes_and_refuses_a_model_with_another_digest():
    made: list[Fake] = []

    def factory(v, hw):
        made.append(Fake(v.name, "aaaaaaaaaaaa"))
        return made[-1]

    assert pinned(factory, {}) is factory
    load = pinned(factory, {"a": "aaaaaaaaaaaa", "b": "bbbbbbbbbbbb"})
    assert load(Variant("a", "noop", 1.0), CPU).digest == "aaaaaaaaaaaa"
    assert load(Variant("c", "noop", 1.0), CPU).digest == "aaaaaaaaaaaa"  # not pinned
    with pytest.raises(DigestMismatch, match="pins 'bbbbbbbbbbbb'"):
        load(Variant("b", "noop", 1.0), CPU)
    assert [m.closed for m in made] == [False, False, True]


def test_a_spec_pin_on_a_user_onnx_file(tmp_path):
    path = linear_onnx(tmp_path / "m.onnx")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    params = {"path": str(path), "shape": [4]}
    assert zoo.load_executor(Variant("v", "onnx", 1.0, {**params, "digest": sha}), CPU).digest == sha[:12]
    assert zoo.load_executor(Variant("v", "onnx", 1.0, {**params, "digest": sha[:12]}), CPU).digest == sha[:12]
    with pytest.raises(DigestMismatch, match=rf"variant 'v' loaded model digest '{sha[:12]}', but the spec "
                                             rf"\(params.digest\) pins '000000000000'"):
        zoo.load_executor(Variant("v", "onnx", 1.0, {**params, "digest": "000000000000"}), CPU)
    with pytest.raises(DigestMismatch, match="'(none)'"[1:-1]):
        zoo.load_executor(Variant("n", "noop", 1.0, {"digest": sha}), CPU)
    with pytest.raises(ValueError, match="params.digest must be a hex string"):
        zoo.load_executor(Variant("v", "onnx", 1.0, {**params, "digest": 123456789012}), CPU)


@pytest.fixture
def pipe(tmp_path: Path):
    doc = {"name": "p", "slo_ms": 1000,
           "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
           "stages": [{"name": "s", "variants": [{"name": v, "model": "noop", "accuracy": 0.9} for v in "ab"],
                       "defaults": {"variant": "a", "max_batch": 2, "batch_timeout_ms": 5}}]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    return load_pipeline(tmp_path / "p.yaml")


def config(epoch: int, digests: dict, variant: str = "a", replicas: int = 1) -> StageConfig:
    return stage_config(pipeline="p", stage="s", variant=variant, hardware="cpu-1", max_batch=2,
                        batch_timeout_ms=5.0, replicas=replicas, partitions=1, epoch=epoch,
                        planner_mode="test", routing={}, digests=digests)


def test_accept_carries_the_pins_and_refuses_a_pin_on_an_unknown_variant(pipe):
    cfg, why = accept(pipe, "s", config(1, {"a": "aaaaaaaaaaaa"}), defaults(pipe, "s"))
    assert why == "" and cfg.digests == {"a": "aaaaaaaaaaaa"}
    assert accept(pipe, "s", config(1, {"zz": "aaaaaaaaaaaa"}), defaults(pipe, "s")) == \
        (None, "digests: unknown variant 'zz' (stage s has ['a', 'b'])")
    rec = config(1, {}).to_dict()
    del rec["digests"]  # a record without pins: nothing pinned
    assert accept(pipe, "s", StageConfig.from_dict(rec), defaults(pipe, "s"))[0].digests == {}


def test_a_worker_refuses_a_config_pinning_another_model_and_keeps_serving_its_own(pipe):
    loaded: list[Fake] = []

    def factory(v, hw):
        loaded.append(Fake(v.name, {"a": "aaaaaaaaaaaa", "b": "bbbbbbbbbbbb"}[v.name]))
        return loaded[-1]

    metrics = StageMetrics.create("p", "s")
    w = StageWorker(pipe, "s", KafkaSettings(), factory, metrics, worker_id="w", warmup_batches=(1,),
                    max_replicas=2)
    rejected = lambda: metrics.registry.get_sample_value(  # noqa: E731
        "slipstream_config_rejected_total", {"pipeline": "p", "stage": "s"})

    async def scenario() -> None:
        pool, switch = w.pool, w.switch
        pool.put_in_force(await pool.prepare(switch.config, pool.fleet))  # the spec's defaults: variant a, unpinned
        # a new variant whose model is not the pinned one: loaded, refused, closed
        assert not await w.offer_config(config(1, {"b": "000000000000"}, variant="b"))
        assert rejected() == 1 and switch.pending is None and loaded[-1].closed
        # the same variant and replicas keep the loaded replica, loading none: it meets the new pin too
        assert not await w.offer_config(config(2, {"a": "000000000000"}))
        assert rejected() == 2 and switch.pending is None
        # the right pins are accepted
        assert await w.offer_config(config(3, {"a": "aaaaaaaaaaaa"}, replicas=2))
        switch.at_boundary()
        assert switch.config.epoch == 3 and switch.config.digests == {"a": "aaaaaaaaaaaa"}
        assert [r.executors["a"].digest for r in pool.fleet.replicas] == ["aaaaaaaaaaaa"] * 2

    try:
        asyncio.run(scenario())
    finally:
        w.pool.close()
