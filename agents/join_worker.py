"""The join worker of a fan-out pipeline: fragments from the join topic, whole results to the results
topic (``agents.join`` does the joining). Run it as ``slipstream worker --pipeline F --stage join``."""
from __future__ import annotations

import asyncio
import logging
import os
import time

import faust

from agents import routing
from agents.join import Joiner
from agents.metrics import StageMetrics
from agents.ready import announce_ready
from streams import codec, kafka as kclient, topics
from streams.app import AppSettings, make_app
from streams.config import KafkaSettings
from streams.spec import Pipeline

log = logging.getLogger(__name__)
JOIN = "join"


def build_join_app(pipe: Pipeline, kafka: KafkaSettings, timeout_ms: float | None = None,
                   web_port: int | None = None, metrics_port: int = 0) -> tuple[faust.App, Joiner]:
    """The join worker: fragments from the join topic, whole results to the results topic."""
    app = make_app(AppSettings(topics.consumer_group(pipe.name, JOIN), kafka, web_port=web_port))
    metrics = StageMetrics.create(pipe.name, JOIN)
    joiner = Joiner(int((timeout_ms if timeout_ms is not None else pipe.slo_ms) * 1e6),
                    worker=f"join-{os.getpid()}")
    held: dict[str, list] = {}
    state = {"producer": None}
    source = app.topic(topics.join(pipe.name), value_serializer="raw", key_serializer="raw")

    async def emit(res: dict, stream) -> None:
        fut = await kclient.send(state["producer"], topics.results(pipe.name), "InferenceResult", res,
                                 key=res["request_id"])
        await fut
        metrics.lab(metrics.results, status=res["status"]).inc()
        for ev in held.pop(res["request_id"], []):
            await stream.ack(ev)

    @app.agent(source, concurrency=1, name="join-agent")
    async def join_agent(stream):
        s = stream.noack()
        if state["producer"] is None:
            state["producer"] = kclient.producer(kafka)
            await state["producer"].start()

        async def expire_loop() -> None:
            while True:
                await asyncio.sleep(0.2)  # a periodic sweep: timeouts are points in time, not events
                for res in joiner.expire(time.time_ns()):
                    await emit(res, s)

        app.add_future(expire_loop())
        async for event in s.events():
            try:
                frag = codec.decode("InferenceResult", event.value)
            except codec.CodecError as exc:
                m = event.message
                log.warning("dead letter %s[%d]@%d: %s", m.topic, m.partition, m.offset, exc)
                metrics.lab(metrics.dead_letters).inc()
                dl = routing.dead_letter(pipe, JOIN, event.value, m.topic, m.partition, m.offset, str(exc),
                                         time.time_ns())
                await (await kclient.send(state["producer"], dl.topic, dl.record, dl.value, key=dl.key))
                await s.ack(event)
                continue
            held.setdefault(frag["request_id"], []).append(event)
            metrics.lab(metrics.requests).inc()
            res = joiner.add(frag, time.time_ns())
            if res is not None:
                await emit(res, s)

    announce_ready(JOIN, app, metrics.serve(metrics_port))
    return app, joiner

