"""The model zoo: metadata, param validation, the synthetic stages' fan-out and routing, the
preprocessing stages, the real EfficientNet-Lite0 (ONNX == torch, cache hit) and MiniLM, and the
example pipelines in deploy/pipelines."""
import json
from pathlib import Path

import numpy as np
import pytest

from slipstream.agents import zoo
from slipstream.agents.models import efficientnet
from slipstream.agents.preprocess import (decode_image, encode_jpeg, encode_png, raw_square_side,
                               synthetic_image)
from slipstream.streams.spec import Hardware, Variant, load_pipeline

ROOT = Path(__file__).resolve().parents[3]
CPU1 = Hardware("cpu-1", "cpu", 0.05, 1)
SMALL = {"width": 32, "depth": 1}


def load(model, params=None, cache_dir=None, name="v"):
    return zoo.load_executor(Variant(name, model, 0.5, params or {}), CPU1,
                             cache_dir=cache_dir or "/nonexistent-cache-not-used")


def distinct_payloads(n):
    return [f"request-{i}".encode() * 3 for i in range(n)]


# ---- metadata and params ------------------------------------------------------------------------


def test_published_accuracies_and_resolutions():
    assert {m: zoo.ZOO[m].accuracy for m in efficientnet.LITE} == {
        "efficientnet-lite0": 0.751, "efficientnet-lite1": 0.767, "efficientnet-lite2": 0.776}
    assert [s.resolution for s in efficientnet.LITE.values()] == [224, 240, 260]
    assert zoo.ZOO["synthetic"].accuracy is None  # synthetic: the spec's number is the truth
    assert all(e.input_content_type and e.output_content_type for e in zoo.ZOO.values())
    assert set(zoo._LOADERS) == set(zoo.ZOO)  # every entry can be loaded


def test_unknown_model_and_unknown_param_are_named():
    with pytest.raises(ValueError, match="unknown model 'resnet-9000'.*synthetic"):
        load("resnet-9000")
    with pytest.raises(ValueError, match=r"unknown params \['widht'\]"):
        load("synthetic", {"widht": 3})
    with pytest.raises(ValueError, match="params.depth must be an integer"):
        load("synthetic", {"depth": 0})
    with pytest.raises(ValueError, match="params.backend"):
        load("all-minilm-l6-v2", {"backend": "tensorrt"})


# ---- synthetic stages ---------------------------------------------------------------------------


def test_synthetic_cost_grows_with_width_and_seed_fixes_weights():
    from slipstream.agents.models.synthetic import SyntheticShape, build_torch

    small, big = SyntheticShape(width=64, depth=2), SyntheticShape(width=256, depth=4)
    n = lambda s: sum(p.numel() for p in build_torch(s).parameters())  # noqa: E731
    assert n(big) > 10 * n(small)
    a, b = load("synthetic", {**SMALL, "seed": 3}), load("synthetic", {**SMALL, "seed": 3})
    c = load("synthetic", {**SMALL, "seed": 4})
    p = distinct_payloads(4)
    assert [o.emits for o in a.run(p)] == [o.emits for o in b.run(p)]
    assert [o.emits for o in a.run(p)] != [o.emits for o in c.run(p)]


def test_detector_fans_out_deterministically_with_the_configured_mean():
    ex = load("detector", {**SMALL, "mean_detections": 2.0})
    payloads = distinct_payloads(1500)
    outs = ex.run(payloads)
    counts = np.array([len(o.emits) for o in outs])
    assert abs(counts.mean() - 2.0) < 0.15  # Poisson(2): std of the mean over 1500 is ~0.04
    assert counts.min() == 0 and counts.max() >= 5  # k really varies, zero detections included
    assert [len(o.emits) for o in ex.run(payloads[:50])] == list(counts[:50])  # deterministic
    many = next(o for o in outs if len(o.emits) >= 3)
    crops = [e.payload for e in many.emits]
    assert len(set(crops)) == len(crops) and all(e.to is None for e in many.emits)
    assert all(len(o.emits) == 0 for o in load("detector", {**SMALL, "mean_detections": 0.0}).run(payloads[:20]))


def test_detector_respects_max_detections():
    outs = load("detector", {**SMALL, "mean_detections": 20.0, "max_detections": 3}).run(distinct_payloads(30))
    assert max(len(o.emits) for o in outs) == 3


def test_language_id_routes_each_item_to_one_branch_with_p_other():
    ex = load("language-id", {**SMALL, "p_other": 0.3,
                              "branches": {"en": "classify", "other": "translate"}})
    payloads = distinct_payloads(2000)
    outs = ex.run(payloads)
    assert all(len(o.emits) == 1 for o in outs)
    targets = [o.emits[0].to for o in outs]
    assert set(targets) == {"classify", "translate"}
    assert abs(targets.count("translate") / len(targets) - 0.3) < 0.04
    assert [o.emits[0].payload for o in outs[:10]] == payloads[:10]  # passes the input on
    assert [o.emits[0].to for o in ex.run(payloads[:100])] == targets[:100]


def test_language_id_general_probabilities_and_bad_configs():
    ex = load("language-id", {**SMALL, "branches": {"a": "x", "b": "y", "c": "z"},
                              "probabilities": {"a": 0.0, "b": 1.0, "c": 0.0}})
    assert {o.emits[0].to for o in ex.run(distinct_payloads(50))} == {"y"}
    with pytest.raises(ValueError, match="exactly one of"):
        load("language-id", {"branches": {"en": "a", "other": "b"}})
    with pytest.raises(ValueError, match="needs branches 'en' and 'other'"):
        load("language-id", {"branches": {"fr": "a", "de": "b"}, "p_other": 0.2})
    with pytest.raises(ValueError, match="sum to 1"):
        load("language-id", {"branches": {"a": "x", "b": "y"}, "probabilities": {"a": 0.5, "b": 0.6}})


def test_noop_holds_a_run_whose_payload_starts_with_hang_on_and_checks_the_params():
    import time

    noop = load("noop", {"hang_on": "HANG", "hang_s": 0.3})
    t0 = time.perf_counter()
    assert noop.run([b"fine"])[0].emits[0].payload == b"fine"
    assert time.perf_counter() - t0 < 0.25
    t0 = time.perf_counter()
    assert noop.run([b"HANG now"])[0].emits[0].payload == b"HANG now"
    assert time.perf_counter() - t0 >= 0.3
    with pytest.raises(ValueError, match="hang_s"):
        load("noop", {"hang_on": "x", "hang_s": -1})


def test_translate_and_noop():
    out = load("translate", SMALL).run(["bonjour".encode()])[0].emits[0]
    doc = json.loads(out.payload)
    assert doc["source"] == "bonjour" and len(doc["tokens"]) == 8 and out.content_type == "application/json"
    noop = load("noop", {"content_type": "image/png"})
    assert noop.run([b"abc", b""])[1].emits[0].payload == b""
    assert noop.run([b"abc"])[0].emits[0].content_type == "image/png"


# ---- preprocessing ------------------------------------------------------------------------------


def test_decode_image_formats_and_errors():
    pixels = synthetic_image(48, seed=2)
    assert np.array_equal(decode_image(encode_png(pixels)), pixels)
    assert np.array_equal(decode_image(pixels.tobytes()), pixels)
    assert np.abs(decode_image(encode_jpeg(pixels)).astype(int) - pixels).mean() < 8
    assert raw_square_side(48 * 48 * 3) == 48 and raw_square_side(48 * 47 * 3) is None
    with pytest.raises(ValueError, match="undecodable image"):
        decode_image(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    with pytest.raises(ValueError, match="undecodable image"):
        decode_image(b"not an image at all")


def test_image_resize_stage_emits_raw_pixels_with_shape_type():
    ex = load("image-resize", {"size": 64})
    for payload in (encode_png(synthetic_image(100)), encode_jpeg(synthetic_image(30)),
                    synthetic_image(64).tobytes()):
        emit = ex.run([payload])[0].emits[0]
        assert emit.content_type == "image/x-raw-uint8;shape=64,64,3"
        assert len(emit.payload) == 64 * 64 * 3
    assert ex.check(ex.example_payload()) is None
    assert "undecodable image" in ex.check(b"\xff\xd8\xff truncated jpeg")
    with pytest.raises(ValueError, match="params.size"):
        load("image-resize", {"size": 3})


def test_tokenize_stage():
    ex = load("tokenize", {"max_length": 8})
    ids = np.frombuffer(ex.run([("hello world " * 20).encode()])[0].emits[0].payload, "<i4")
    assert len(ids) == 8 and ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP], truncated
    assert "utf-8" in ex.check(b"\xff\xfe\xfd") and "empty" in ex.check(b"   ")


# ---- real models ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lite0_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def test_efficientnet_lite0_onnx_matches_torch_and_caches(lite0_cache, caplog):
    import torch

    path, hit = zoo.efficientnet_onnx("efficientnet-lite0", lite0_cache)
    assert not hit and path.parent == lite0_cache and "efficientnet-lite0" in path.name
    assert not list(lite0_cache.glob("*.tmp"))  # written atomically, nothing left behind
    ex = load("efficientnet-lite0", cache_dir=lite0_cache)
    mtime = path.stat().st_mtime_ns
    assert zoo.efficientnet_onnx("efficientnet-lite0", lite0_cache) == (path, True)
    load("efficientnet-lite0", cache_dir=lite0_cache)  # second load: no export
    assert path.stat().st_mtime_ns == mtime and len(list(lite0_cache.glob("*.onnx"))) == 1

    payloads = [ex.example_payload(), synthetic_image(224, seed=7).tobytes()]
    batch = ex.codec.collate([ex.codec.decode(p) for p in payloads])
    onnx_logits = ex.backend(batch)
    with torch.inference_mode():
        torch_logits = efficientnet.build_torch(efficientnet.LITE["efficientnet-lite0"])(
            torch.from_numpy(batch["x"])).numpy()
    assert onnx_logits.shape == (2, 1000)
    np.testing.assert_allclose(onnx_logits, torch_logits, atol=1e-3, rtol=1e-3)
    assert list(onnx_logits.argmax(1)) == list(torch_logits.argmax(1))
    top5 = json.loads(ex.run(payloads[:1])[0].emits[0].payload)["top5"]
    assert top5[0][0] == int(torch_logits[0].argmax()) and len(top5) == 5
    assert "undecodable image" in ex.check(b"\x89PNG\r\n\x1a\nbroken")


def test_efficientnet_lite0_recognises_a_real_photo(lite0_cache):
    # matplotlib ships a photo of Grace Hopper in uniform; ImageNet class 652 is "military uniform".
    # This fails if the preprocessing (mean/std, channel order) or the weights are wrong.
    mpl_data = pytest.importorskip("matplotlib").get_data_path()
    photo = Path(mpl_data) / "sample_data" / "grace_hopper.jpg"
    if not photo.exists():
        pytest.skip("matplotlib sample photo not installed")
    out = load("efficientnet-lite0", cache_dir=lite0_cache).run([photo.read_bytes()])[0]
    top5 = json.loads(out.emits[0].payload)["top5"]
    assert top5[0][0] == 652 and top5[0][1] > 0.3


def test_minilm_embeds_similar_sentences_closer():
    ex = load("all-minilm-l6-v2")
    sentences = ["A man is eating food.", "A man is eating a piece of bread.",
                 "The stock market crashed today."]
    outs = ex.run([s.encode() for s in sentences])
    vecs = np.stack([np.frombuffer(o.emits[0].payload, "<f4") for o in outs])
    assert vecs.shape == (3, 384) and outs[0].emits[0].content_type == "application/x-float32-vector"
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sim = vecs @ vecs.T
    assert sim[0, 1] > 0.6 and sim[0, 2] < 0.2 and sim[1, 2] < 0.2
    # batching pads: a sentence alone gives the same vector as in a padded batch
    alone = np.frombuffer(ex.run([sentences[2].encode()])[0].emits[0].payload, "<f4")
    np.testing.assert_allclose(alone, vecs[2], atol=1e-5)
    # the tokenize stage + input=tokens gives the same embedding as text in one stage
    tok = load("tokenize")
    ids = tok.run([sentences[0].encode()])[0].emits[0].payload
    via_tokens = load("all-minilm-l6-v2", {"input": "tokens"}).run([ids])[0].emits[0].payload
    np.testing.assert_allclose(np.frombuffer(via_tokens, "<f4"), vecs[0], atol=1e-5)
    assert "utf-8" in ex.check(b"\xff\xfe")


# ---- example pipelines --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["image-classify", "text-embed", "dag-fanout"])
def test_example_pipelines_validate_against_spec_and_zoo(name):
    pipe = load_pipeline(ROOT / "deploy" / "pipelines" / f"{name}.yaml")
    assert pipe.name == name
    for stage in pipe.stages:
        for v in stage.variants:
            params = zoo.resolve_params(v)
            published = zoo.ZOO[v.model].accuracy
            if published is not None:
                assert v.accuracy == pytest.approx(published), f"{v.name}: use the published accuracy"
            if v.model == "language-id":
                # routing targets are real children and the edge probabilities match p_other
                kids = {e.dst: e.probability for e in pipe.children(stage.name)}
                assert set(params["branches"].values()) == set(kids)
                assert kids[params["branches"]["other"]] == pytest.approx(params["p_other"])
            if v.model == "detector" and v.name == stage.defaults.variant:
                (edge,) = pipe.children(stage.name)
                assert edge.fanout == pytest.approx(params["mean_detections"])


def test_dag_fanout_visit_ratios():
    pipe = load_pipeline(ROOT / "deploy" / "pipelines" / "dag-fanout.yaml")
    assert pipe.visit_ratio("langid") == pytest.approx(2.0)
    assert pipe.visit_ratio("translate") == pytest.approx(0.6)
    assert pipe.visit_ratio("classify") == pytest.approx(2.0)
    assert pipe.sinks == ("classify",)
    gpu = load_pipeline(ROOT / "deploy" / "pipelines" / "image-classify.yaml").hardware["gpu"]
    assert gpu.kind == "cuda" and gpu.cost_per_hour == 2.5


def test_bench_executor_reports_both_throughputs_and_their_ratio(lite0_cache):
    from slipstream.loadgen.bench.executor import bench_executor, format_rows

    (row,) = bench_executor((2,), runs=1, iterations=1, cache_dir=lite0_cache)
    assert row.batch == 2 and row.device == "cpu" and row.executor_items_per_s > 0
    assert row.ratio == pytest.approx(row.executor_items_per_s / row.raw_ort_items_per_s)
    assert "efficientnet-lite0" in format_rows([row])
    with pytest.raises(ValueError, match="payload"):
        bench_executor((1,), payload="gif", cache_dir=lite0_cache)


def test_resize_emits_the_same_pixels_as_decoding_to_an_array_and_resizing_it():
    from slipstream.agents.preprocess import decode_image, encode_jpeg, encode_png, resize_image, resized_bytes, synthetic_image

    for payload in (encode_jpeg(synthetic_image(480)), encode_png(synthetic_image(300)),
                    synthetic_image(300).tobytes(), synthetic_image(260).tobytes()):
        assert resized_bytes(payload, 260) == resize_image(decode_image(payload), 260).tobytes()
