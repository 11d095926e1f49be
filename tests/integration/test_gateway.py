"""The gateway on the real broker, with real worker and gateway processes and a real HTTP client
(aiohttp): an image classified through ``POST /v2/models/<image-classify>/infer``; a budget that cannot
be met answered 504 with the drop reason; an overloaded pipeline shed with 429 + ``Retry-After`` while
the admitted requests keep their deadline; and two gateways, one killed mid-load and restarted: no
answer lost for the clients of the other; the Python client and ``slipstream submit`` through a
gateway and through Kafka; gRPC ModelInfer through the same request path."""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
import yaml
import pytest
from PIL import Image

from slipstream.gateway.client import GatewayClient, GatewayError, connect
from slipstream.gateway.server import GRPC_READY
from slipstream.schemas.records import InferenceResult
from slipstream.streams import admin, topics
from slipstream.streams.client import SyncClient
from slipstream.streams.spec import load_pipeline

from .workers import Workers, start_gateway

ROOT = Path(__file__).resolve().parents[2]
HEADER_LENGTH = "Inference-Header-Content-Length"


def binary_infer(payload: bytes, content_type: str, **parameters) -> tuple[bytes, dict]:
    """An OIP infer request with the payload as binary UINT8 data (the binary-data extension)."""
    head = json.dumps({"id": "client-1", "parameters": parameters,
                       "inputs": [{"name": "input", "shape": [len(payload)], "datatype": "UINT8",
                                   "parameters": {"binary_data_size": len(payload), "content_type": content_type}}]}).encode()
    return head + payload, {HEADER_LENGTH: str(len(head)), "Content-Type": "application/octet-stream"}


def text_infer(text: str, **parameters) -> dict:
    return {"parameters": parameters, "inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": [text]}]}


def png(seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (96, 96, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def write_spec(tmp: Path, doc: dict) -> Path:
    path = tmp / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def one_stage(name: str, slo_ms: float, params: dict, model: str = "synthetic", max_batch: int = 4) -> dict:
    return {"name": name, "slo_ms": slo_ms, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
            "stages": [{"name": "s", "variants": [{"name": "v", "model": model, "accuracy": 0.7, "params": params}],
                        "defaults": {"max_batch": max_batch, "batch_timeout_ms": 2, "partitions": 2}}], "edges": []}


@contextlib.asynccontextmanager
async def serving(kafka, tmp_path, doc: dict, start, *gateway_args: str):
    """``doc`` served on the broker: its topics, its workers (``start(workers)`` starts them) and one
    gateway process; yields ``(pipe, path, gateway, url)`` and stops the processes on the way out."""
    path = write_spec(tmp_path, doc)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    workers = Workers(path, kafka.bootstrap)
    gw = None
    try:
        start(workers)
        gw, url = start_gateway(path, kafka.bootstrap, *gateway_args)
        yield pipe, path, gw, url
    finally:
        if gw is not None:
            gw.stop()
        workers.stop()


def start_slowly(workers: Workers) -> None:
    for w in workers.start("resize", "classify", wait=False):
        w.wait_ready(600)  # a first start exports EfficientNet-Lite0 to ONNX


async def test_an_image_is_classified_and_an_impossible_budget_gets_504_with_the_drop_reason(kafka, unique, tmp_path):
    doc = yaml.safe_load((ROOT / "deploy/pipelines/image-classify.yaml").read_text())
    doc["name"] = unique
    classify = next(s for s in doc["stages"] if s["name"] == "classify")
    classify["variants"] = [v for v in classify["variants"] if v["name"] == "lite0"]  # one ONNX export
    async with serving(kafka, tmp_path, doc, start_slowly) as (_, _, _, url), \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        async with http.get(f"{url}/v2/health/ready") as r:
            assert r.status == 200
        async with http.get(f"{url}/v2/models/{unique}") as r:
            md = await r.json()
        assert md["parameters"]["slo_ms"] == 400 and md["parameters"]["stages"][1]["variants"][0]["accuracy"] == 0.751
        body, headers = binary_infer(png(), "image/png")
        async with http.post(f"{url}/v2/models/{unique}/infer", data=body, headers=headers) as r:
            assert r.status == 200, await r.text()
            doc = await r.json()
        assert doc["id"] == "client-1" and doc["parameters"]["status"] == "done"
        top5 = json.loads(doc["outputs"][0]["data"][0])["top5"]
        assert len(top5) == 5 and all(0 <= cls < 1000 for cls, _ in top5)
        hops = doc["parameters"]["hops"]
        assert [h["stage"] for h in hops] == ["resize", "classify"] and hops[1]["variant"] == "lite0"
        assert all(h["service_ms"] > 0 and h["queue_ms"] >= 0 for h in hops)
        assert doc["parameters"]["latency_ms"] >= sum(h["service_ms"] for h in hops)
        # a 1 ms budget: the resize worker drops it; the answer says why, at once (not after the SLO)
        t0 = time.monotonic()
        async with http.post(f"{url}/v2/models/{unique}/infer", data=body,
                             headers={**headers, "Slipstream-Deadline-Ms": "1"}) as r:
            assert r.status == 504, await r.text()
            err = await r.json()
        assert time.monotonic() - t0 < 0.4 + 0.5  # deadline + grace at most, never the full SLO and more
        assert err["parameters"]["status"] == "dropped" and err["parameters"]["reason"].startswith("deadline")
        assert err["parameters"]["deadline_ms"] == 1.0
        async with http.get(f"{url}/metrics") as r:
            metrics = await r.text()
        assert f'slipstream_gateway_requests_total{{code="504",pipeline="{unique}"}} 1.0' in metrics


async def post(http, url: str, body: dict) -> tuple[int, dict, dict]:
    async with http.post(url, json=body) as r:
        return r.status, await r.json(), dict(r.headers)


async def test_an_overloaded_pipeline_sheds_with_429_and_the_admitted_keep_their_deadline(kafka, unique, tmp_path):
    doc = one_stage(unique, 500, {"width": 2048, "depth": 6, "seed": 2}, max_batch=2)
    async with serving(kafka, tmp_path, doc, lambda w: w.start("s")) as (_, _, _, url), \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        infer = f"{url}/v2/models/{unique}/infer"
        serial = []
        for i in range(10):  # one at a time: the gateway learns the unloaded latency and a rate
            code, doc, _ = await post(http, infer, text_infer(f"warm {i}"))
            assert code == 200, doc
            serial.append(doc["parameters"]["latency_ms"])
        rate = 5 * 1000 / float(np.median(serial))  # five times what one-at-a-time service sustains
        tasks = []
        for i in range(int(rate * 4)):  # open loop for 4 s
            tasks.append(asyncio.create_task(post(http, infer, text_infer(f"load {i}"))))
            await asyncio.sleep(1 / rate)
        answers = await asyncio.gather(*tasks)
        async with http.get(f"{url}/metrics") as r:
            metrics = await r.text()
    shed = [(doc, h) for code, doc, h in answers if code == 429]
    admitted = [(code, doc) for code, doc, _ in answers if code != 429]
    print(f"overload: {len(answers)} sent at {rate:.0f}/s (serial median {np.median(serial):.1f} ms), "
          f"{len(shed)} shed, codes of the admitted {sorted(c for c, _ in admitted)[:3]}..., "
          f"latency p99 of the admitted {np.percentile([d['parameters']['latency_ms'] for c, d in admitted if c == 200] or [0], 99):.0f} ms")
    assert {code for code, _, _ in answers} <= {200, 429, 504}, {code for code, _, _ in answers}
    on_time = [doc for code, doc in admitted if code == 200 and doc["parameters"]["latency_ms"] <= doc["parameters"]["deadline_ms"]]
    assert len(on_time) >= 0.9 * len(admitted), f"{len(on_time)} of {len(admitted)} admitted on time"
    assert len(shed) >= 0.2 * len(answers), f"{len(shed)} of {len(answers)} shed"
    assert all(int(h["Retry-After"]) >= 1 and doc["parameters"]["retry_after_s"] == int(h["Retry-After"]) for doc, h in shed)
    assert f'slipstream_gateway_shed_total{{pipeline="{unique}"}} {float(len(shed))}' in metrics


async def test_a_gateway_killed_mid_load_loses_no_answer_of_the_other_gateways_clients(kafka, unique, tmp_path):
    path = write_spec(tmp_path, one_stage(unique, 5000, {"width": 256, "depth": 2, "seed": 2}, max_batch=8))
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    workers = Workers(path, kafka.bootstrap)
    gateways = []
    try:
        workers.start("s")
        for _ in range(2):
            gateways.append(start_gateway(path, kafka.bootstrap))
        (g1, url1), (g2, url2) = gateways
        stop_at = time.monotonic() + 8.0
        killed = asyncio.Event()

        async def client(url: str, tag: str, out: list) -> None:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                i = 0
                while time.monotonic() < stop_at:
                    i += 1
                    try:
                        out.append(await post(http, f"{url}/v2/models/{unique}/infer", text_infer(f"{tag} {i}")))
                    except aiohttp.ClientError as exc:
                        out.append((None, {"error": repr(exc)}, {}))
                        if killed.is_set():
                            return

        async def kill_then_restart() -> None:
            await asyncio.sleep(2.0)  # mid-load: both gateways have requests in flight
            g1.proc.kill()
            killed.set()
            await asyncio.to_thread(g1.proc.wait, 10)
            gateways.append(await asyncio.to_thread(start_gateway, path, kafka.bootstrap))  # restarted
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                for i in range(5):
                    after.append(await post(http, f"{gateways[-1][1]}/v2/models/{unique}/infer", text_infer(f"after {i}")))

        at_g1, at_g2, after = [[] for _ in range(8)], [[] for _ in range(8)], []
        await asyncio.gather(*(client(url1, f"a{k}", at_g1[k]) for k in range(8)),
                             *(client(url2, f"b{k}", at_g2[k]) for k in range(8)), kill_then_restart())
    finally:
        for g, _ in gateways:
            g.stop()
        workers.stop()
    b = [a for per in at_g2 for a in per]
    a = [x for per in at_g1 for x in per]
    assert len(b) > 50 and all(code == 200 and doc["parameters"]["status"] == "done" for code, doc, _ in b), \
        [doc for code, doc, _ in b if code != 200][:3]
    assert len({doc["parameters"]["request_id"] for _, doc, _ in b}) == len(b)
    assert any(code is None for code, _, _ in a), "the killed gateway's clients saw their connections fail"
    assert len(after) == 5 and all(code == 200 for code, _, _ in after)


async def test_the_python_client_and_submit_go_through_the_gateway_or_kafka(kafka, unique, tmp_path):
    doc = one_stage(unique, 5000, {"content_type": "text/plain"}, model="noop")
    async with serving(kafka, tmp_path, doc, lambda w: w.start("s")) as (pipe, path, _, url):
        blob = bytes(range(256))  # not text: answered as binary data
        async with connect(pipe, kafka, url) as via_gw, connect(pipe, kafka) as via_kafka:
            assert isinstance(via_gw, GatewayClient) and not isinstance(via_kafka, GatewayClient)
            for c in (via_gw, via_kafka):
                ids = [await c.submit(p, content_type="text/plain", slo_ms=4000) for p in (b"hello", blob)]
                text, binary = [await c.result(rid, 30) for rid in ids]  # both: InferenceResult records
                assert isinstance(text, InferenceResult) and isinstance(binary, InferenceResult)
                assert (text.status, text.output, binary.output) == ("done", b"hello", blob)
                assert [h.stage for h in text.hops] == ["s"] and text.deadline_ns - text.created_ns == 4000e6
            dropped = await via_gw.result(await via_gw.submit(b"late", slo_ms=0.01), 30)  # the worker drops it
            assert dropped.status == "dropped" and dropped.reason.startswith("deadline"), dropped
            with pytest.raises(GatewayError) as bad:
                await via_gw.call(b"x", accuracy_floor=2.0)
            assert bad.value.code == 400 and "accuracy_floor" in bad.value.message
        with SyncClient(pipe, kafka, client=GatewayClient(pipe, url)) as sync:
            assert sync.call(b"from blocking code", timeout_s=30).output == b"from blocking code"
        (tmp_path / "in.txt").write_bytes(b"from the shell")
        out = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "slipstream.cli", "submit", "--pipeline",
                                                       str(path), "--input", str(tmp_path / "in.txt"), "--gateway", url],
                                      capture_output=True, text=True, timeout=60, env={**os.environ, "SLIPSTREAM_BOOTSTRAP": kafka.bootstrap})
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout)
        assert (res["status"], res["output"], res["content_type"]) == ("done", "from the shell", "text/plain")
        async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
            metrics = await r.text()
        assert f'slipstream_gateway_requests_total{{code="200",pipeline="{unique}"}} 4.0' in metrics  # 2 + 1 + 1


async def test_grpc_model_infer_goes_through_the_same_request_path(kafka, unique, tmp_path):
    from grpc import StatusCode, aio

    from slipstream.gateway.grpc_v2 import grpc_predict_v2_pb2 as pb, grpc_predict_v2_pb2_grpc as pb_grpc

    doc = one_stage(unique, 5000, {"content_type": "application/octet-stream"}, model="noop")
    async with serving(kafka, tmp_path, doc, lambda w: w.start("s"), "--grpc-port", "0") as (_, _, gw, url):
        target = next(m.group(1) for m in map(GRPC_READY.search, list(gw.lines)) if m)
        async with aio.insecure_channel(target) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            assert (await stub.ServerLive(pb.ServerLiveRequest(), timeout=10)).live
            assert (await stub.ServerReady(pb.ServerReadyRequest(), timeout=10)).ready
            assert (await stub.ModelReady(pb.ModelReadyRequest(name=unique), timeout=10)).ready
            md = await stub.ModelMetadata(pb.ModelMetadataRequest(name=unique), timeout=10)
            assert md.name == unique and [t.name for t in md.inputs] == ["input"]

            def infer(model: str, payload: bytes, **params) -> pb.ModelInferRequest:
                req = pb.ModelInferRequest(model_name=model, id="g1")
                req.inputs.add(name="input", datatype="UINT8", shape=[len(payload)])
                req.raw_input_contents.append(payload)
                for k, v in params.items():
                    req.parameters[k].double_param = v
                return req

            blob = bytes(range(256))
            out = await stub.ModelInfer(infer(unique, blob), timeout=30)
            assert out.id == "g1" and out.raw_output_contents[0] == struct.pack("<I", 256) + blob
            assert out.parameters["status"].string_param == "done"
            assert json.loads(out.parameters["hops"].string_param)[0]["stage"] == "s"
            with pytest.raises(aio.AioRpcError) as dropped:  # the worker drops it: DEADLINE_EXCEEDED, the reason
                await stub.ModelInfer(infer(unique, b"late", deadline_ms=0.01), timeout=30)
            assert dropped.value.code() == StatusCode.DEADLINE_EXCEEDED
            meta = dict(dropped.value.trailing_metadata())
            assert meta["slipstream-status"] == "dropped" and meta["slipstream-reason"].startswith("deadline"), meta
            with pytest.raises(aio.AioRpcError) as unknown:
                await stub.ModelInfer(infer("other", b"x"), timeout=10)
            assert unknown.value.code() == StatusCode.NOT_FOUND
            with pytest.raises(aio.AioRpcError) as bad:
                await stub.ModelInfer(infer(unique, b"x", accuracy_floor=2.0), timeout=10)
            assert bad.value.code() == StatusCode.INVALID_ARGUMENT and "accuracy_floor" in bad.value.details()
        async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
            metrics = await r.text()
        for code in (200, 504, 404, 400):  # counted by the request path REST shares
            assert f'slipstream_gateway_requests_total{{code="{code}",pipeline="{unique}"}} 1.0' in metrics, code
