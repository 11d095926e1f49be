"""The edge when Kafka fails or refuses, on real brokers with real worker and gateway processes:

- a broker frozen (SIGSTOP) under load: every request is answered within its deadline + 1 s (503 with
  ``Retry-After``) and readiness says false; thawed, requests are served again with no restart;
- a request over the input topic's ``max.message.bytes`` (set by the spec's ``max_message_bytes``) is
  refused 413 before it reaches Kafka, and the requests after it are all served;
- a batch the broker refuses (the size check off) does not poison the client: its producer is
  replaced and every later request is written.
"""
from __future__ import annotations

import asyncio
import os
import signal
import time

import aiohttp

from slipstream.streams import admin, broker, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.config import KafkaSettings
from slipstream.streams.limits import Limits
from slipstream.streams.spec import load_pipeline

from .test_gateway import one_stage, serving, text_infer
from .workers import Workers

DEADLINE_MS = 300
GRACE_S = 0.5  # the gateway's default grace_ms


def echo(name: str, slo_ms: float) -> dict:
    return one_stage(name, slo_ms, {"content_type": "text/plain"}, model="noop")


def start_echo(workers: Workers) -> None:
    workers.start("s")


async def infer(http, url: str, model: str, deadline_ms: float = DEADLINE_MS, text: str = "hi") -> tuple[int, float, dict]:
    t0 = time.monotonic()
    async with http.post(f"{url}/v2/models/{model}/infer", json=text_infer(text),
                         headers={"Slipstream-Deadline-Ms": str(deadline_ms)}) as r:
        return r.status, time.monotonic() - t0, {**dict(r.headers), "body": await r.json()}


async def ready(http, url: str) -> int:
    async with http.get(f"{url}/v2/health/ready") as r:
        return r.status


async def until(check, timeout_s: float, what: str) -> None:
    """Poll an outside process's state (no event reaches this test from it) until ``check()``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"not {what} within {timeout_s} s"
        await asyncio.sleep(0.2)


async def served(http, url: str, model: str) -> bool:
    return (await infer(http, url, model, deadline_ms=2000))[0] == 200


async def test_a_frozen_broker_is_answered_503_within_the_deadline_and_served_again(own_broker, unique, tmp_path):
    kafka = KafkaSettings(bootstrap=own_broker.bootstrap)
    doc = echo(unique, 2000)
    async with serving(kafka, tmp_path, doc, start_echo) as (_, _, _, url), \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        await until(lambda: served(http, url, unique), 60, "served")
        pid = broker.running_pid(own_broker)
        os.kill(pid, signal.SIGSTOP)
        try:
            answers = await asyncio.gather(*(infer(http, url, unique) for _ in range(8)))
            for code, took_s, headers in answers:  # sent at once: before readiness can know
                assert code == 503 and took_s <= DEADLINE_MS / 1000 + 1.0, (code, took_s, headers["body"])
                assert headers["Retry-After"] == "1", headers
            await until(lambda: _is(ready(http, url), 503), 10, "not ready")
            code, took_s, headers = await infer(http, url, unique)
            assert code == 503 and took_s < 0.2 and "not ready" in headers["body"]["error"], (code, took_s, headers)
        finally:
            os.kill(pid, signal.SIGCONT)
        await until(lambda: _is(ready(http, url), 200), 30, "ready again")
        await until(lambda: served(http, url, unique), 90, "served again")


async def _is(status, expected: int) -> bool:
    return await status == expected


async def test_a_request_over_the_topic_limit_gets_413_and_the_next_100_are_served(kafka, unique, tmp_path):
    doc = {**echo(unique, 5000), "max_message_bytes": 256 * 1024}
    async with serving(kafka, tmp_path, doc, start_echo) as (pipe, _, _, url), \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        limits = await _limits(kafka, pipe)
        assert limits.of(topics.stage_input(unique, "s")) == 256 * 1024  # set from the spec
        code, _, headers = await infer(http, url, unique, text="x" * (2 * 1024 * 1024), deadline_ms=5000)
        assert code == 413, headers["body"]
        assert headers["body"]["parameters"]["limit_bytes"] == 256 * 1024
        codes = await asyncio.gather(*(infer(http, url, unique, deadline_ms=5000, text=f"r{i}") for i in range(100)))
        assert [c for c, _, _ in codes] == [200] * 100


async def _limits(kafka, pipe) -> Limits:
    from slipstream.streams.limits import read_limits

    return await read_limits(kafka, [t.name for t in topics.all_topics(pipe)])


async def test_a_batch_the_broker_refuses_does_not_poison_the_client(kafka, unique, tmp_path):
    from .test_gateway import write_spec

    pipe = load_pipeline(write_spec(tmp_path, {**echo(unique, 5000), "max_message_bytes": 256 * 1024}))
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    async with PipelineClient(pipe, kafka, linger_ms=0) as client:
        client.limits = Limits(default=10**8)  # the size check off: the broker itself refuses
        failed = []
        for _ in range(3):
            refused = await asyncio.gather(client.send(make_request(pipe, b"x" * 400_000), timeout_s=10),
                                           return_exceptions=True)
            assert "MessageSizeTooLarge" in repr(refused[0])
            small = await asyncio.gather(*(client.send(make_request(pipe, b"y"), timeout_s=10)
                                           for _ in range(16)), return_exceptions=True)
            failed += [repr(e) for e in small if isinstance(e, BaseException)]
        assert failed == []
