"""The Faust app of one stage worker (or of a pipeline's join worker).

Run it either way:

    slipstream worker --pipeline deploy/pipelines/image-classify.yaml --stage classify
    SLIPSTREAM_PIPELINE=deploy/pipelines/image-classify.yaml SLIPSTREAM_STAGE=classify \\
        faust -A agents.app worker --without-web

Each stage is its own consumer group (app id ``slipstream-<pipeline>-<stage>``) reading the stage's
input topic with ``concurrency=1`` (faust issue #606); parallelism comes from partitions x workers.
When the worker has its partitions it prints ``slipstream-worker ready stage=<s> partitions=<n>
metrics=<port>`` on stdout, which the supervisor and the activation-time benchmark wait for.
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
import time

import faust

from agents import routing
from agents.join import Joiner
from agents.metrics import StageMetrics
from agents.worker import ExecutorFactory, StageWorker
from streams import codec, kafka as kclient, topics
from streams.app import AppSettings, make_app
from streams.config import KafkaSettings
from streams.spec import Pipeline, load_pipeline

log = logging.getLogger(__name__)
JOIN = "join"


def _announce(role: str, app: faust.App, metrics_port: int, started: asyncio.Event | None = None) -> None:
    """Print the ready line after each rebalance, once the worker's model is loaded and warm (in a
    task of its own: the rebalance must not wait for it)."""
    async def announce() -> None:
        if started is not None:
            await started.wait()
        parts = sorted(tp.partition for tp in app.consumer.assignment())
        print(f"slipstream-worker ready stage={role} partitions={len(parts)} "
              f"metrics={metrics_port} at_ns={time.time_ns()}", flush=True)

    async def on_rebalance_complete(sender, **kwargs) -> None:
        asyncio.ensure_future(announce())

    app.on_rebalance_complete.connect(on_rebalance_complete)


def build_stage_app(pipe: Pipeline, stage: str, kafka: KafkaSettings, factory: ExecutorFactory,
                    web_port: int | None = None, metrics_port: int = 0,
                    max_instances: int | None = None) -> tuple[faust.App, StageWorker]:
    app = make_app(AppSettings(topics.consumer_group(pipe.name, stage), kafka, web_port=web_port))
    metrics = StageMetrics.create(pipe.name, stage)
    worker = StageWorker(pipe, stage, kafka, factory, metrics, max_instances=max_instances)
    source = app.topic(topics.stage_input(pipe.name, stage), value_serializer="raw", key_serializer="raw")

    @app.agent(source, concurrency=1, name=f"{stage}-agent")
    async def stage_agent(stream):
        worker.stream = s = stream.noack()
        async for event in s.events():
            await worker.on_event(event)

    @app.task
    async def start_worker() -> None:
        await worker.start()
        app.add_future(worker.run_batches())
        app.add_future(follow_control(pipe, stage, kafka, worker))

    async def on_revoked(sender, revoked, **kwargs) -> None:
        await worker.on_revoked(set(revoked), app.consumer._commit)  # faust's thread-safe commit

    app.on_partitions_revoked.connect(on_revoked)

    @app.on_before_shutdown.connect
    async def _stop(sender, **kwargs) -> None:
        await worker.stop()

    _announce(stage, app, metrics.serve(metrics_port), worker.started)
    return app, worker


async def follow_control(pipe: Pipeline, stage: str, kafka: KafkaSettings, worker: StageWorker) -> None:
    """Read the compacted control topic from the start, forever; offer each record to the worker."""
    cons = kclient.consumer(kafka, topics.control(pipe.name), group_id=None)
    await cons.start()
    try:
        async for msg in cons:
            if msg.key is not None and msg.key.decode() != stage:
                continue
            try:
                rec = codec.decode("StageConfig", msg.value)
            except codec.CodecError as exc:
                log.warning("undecodable control record at offset %d: %s", msg.offset, exc)
                worker.metrics.lab(worker.metrics.config_rejected).inc()
                continue
            await worker.offer_config(rec)
    finally:
        await cons.stop()


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

    _announce(JOIN, app, metrics.serve(metrics_port))
    return app, joiner


def app_from_env() -> faust.App:
    """For `faust -A agents.app worker`: the stage named by SLIPSTREAM_PIPELINE / SLIPSTREAM_STAGE."""
    from agents.zoo import load_executor

    pipe_file, stage = os.environ.get("SLIPSTREAM_PIPELINE"), os.environ.get("SLIPSTREAM_STAGE")
    if not pipe_file or not stage:
        sys.exit("set SLIPSTREAM_PIPELINE (a pipeline spec file) and SLIPSTREAM_STAGE (a stage name or 'join')")
    pipe = load_pipeline(pipe_file)
    kafka = KafkaSettings.from_env()
    if stage == JOIN:
        return build_join_app(pipe, kafka)[0]
    cache = os.environ.get("SLIPSTREAM_CACHE")
    factory = (lambda v, h: load_executor(v, h, cache_dir=cache)) if cache else load_executor
    return build_stage_app(pipe, stage, kafka, factory)[0]


def __getattr__(name: str):  # `faust -A agents.app` looks up `app` lazily, so importing is free
    if name == "app":
        return app_from_env()
    raise AttributeError(name)
