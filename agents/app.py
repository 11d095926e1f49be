"""The Faust app of one stage worker (or of a pipeline's join worker).

Run it either way:

    slipstream worker --pipeline deploy/pipelines/image-classify.yaml --stage classify
    SLIPSTREAM_PIPELINE=deploy/pipelines/image-classify.yaml SLIPSTREAM_STAGE=classify \\
        faust -A slipstream.agents.app worker --without-web

Each stage is its own consumer group (app id ``slipstream-<pipeline>-<stage>``) reading the stage's
input topic with ``concurrency=1`` (faust issue #606); parallelism comes from partitions x workers.
When the worker has its partitions it prints ``slipstream-worker ready stage=<s> partitions=<n>
metrics=<host:port>`` on stdout, which the supervisor and the activation-time benchmark wait for;
``/readyz`` on the metrics address (``SLIPSTREAM_METRICS_ADDR`` under ``faust -A``) says the same.
"""
from __future__ import annotations

import logging
import sys

import faust
from aiokafka import TopicPartition

from ..schemas.records import StageConfig
from ..streams import codec, control_io, kafka as kclient, topics
from ..streams.app import AppSettings, join_group_after, make_app, rejoin_group
from ..streams.config import (KafkaSettings, cache_from_env, metrics_addr_from_env, prefixes_from_env,
                                       schema_registry_from_env, stage_from_env)
from ..streams.control_rules import InvalidControl, check_key
from ..streams.metrics_http import LOCAL, MetricsAddr
from ..streams.profile_store import ProfileStore
from ..streams.spec import Pipeline, load_pipeline
from ..streams.timeline import mark
from .intake import use_bulk_intake
from .join_worker import JOIN, build_join_app
from .metrics import StageMetrics
from .ready import serve_worker
from .worker import ExecutorFactory, StageWorker

log = logging.getLogger(__name__)


def build_stage_app(pipe: Pipeline, stage: str, kafka: KafkaSettings, factory: ExecutorFactory,
                    web_port: int | None = None, metrics_addr: MetricsAddr = LOCAL,
                    max_replicas: int | None = None, profiles: ProfileStore | None = None,
                    commit_interval_s: float = AppSettings.commit_interval_s) -> tuple[faust.App, StageWorker]:
    app = make_app(AppSettings(topics.consumer_group(pipe.name, stage), kafka, web_port=web_port,
                               commit_interval_s=commit_interval_s))
    metrics = StageMetrics.create(pipe.name, stage, pipe.slo_ms)
    worker = StageWorker(pipe, stage, kafka, factory, metrics, max_replicas=max_replicas, profiles=profiles)
    # faust's consumer hands each fetch of the source to the worker in one call and commits the
    # worker's done prefix (slipstream.agents.intake; exactly-once: none, the worker's transactions commit), so
    # faust records no per-message acks of the source (acks=False)
    source_name = topics.stage_input(pipe.name, stage)
    use_bulk_intake(app, {source_name: worker})
    txns = worker.commits.txns
    if txns is not None:  # a partition whose transaction failed is read again (slipstream.agents.transactions)
        txns.on_reread = lambda tp: rejoin_group(app)
        txns.on_stuck = worker.heartbeat.fail  # not live: restarted, the partition read again
    source = app.topic(source_name, value_serializer="raw", key_serializer="raw", acks=False)

    @app.agent(source, concurrency=1, name=f"{stage}-agent")
    async def stage_agent(stream):  # subscribes the source; its records reach the worker in bulk
        async for event in stream.noack().events():  # only if faust's per-message path delivered one
            worker.on_records(event.message.tp, [event.message])

    feed: list[ControlFeed] = []

    async def warm() -> None:  # before the group join: a cold member would hold partitions while it loads
        control = ControlFeed(pipe, stage, kafka, worker.metrics.lab(worker.metrics.control_invalid).inc,
                              on_plan=worker.on_plan if stage == pipe.source else None)
        await control.start()
        await worker.start(await control.held())
        feed.append(control)

    join_group_after(app, warm)

    @app.task
    async def start_worker() -> None:  # faust runs it after the first assignment, so after warm()
        await worker.started.wait()
        app.add_future(worker.run_batches())
        app.add_future(feed[0].follow(worker))

    async def on_revoked(sender, revoked, **kwargs) -> None:
        await worker.on_revoked(set(revoked), app.consumer._commit)  # faust's thread-safe commit

    async def on_assigned(sender, assigned, **kwargs) -> None:
        mark("assigned", partitions=len(assigned))

    async def on_rebalance_complete(sender, **kwargs) -> None:  # before faust seeks to committed offsets
        await worker.on_assigned(set(app.consumer.assignment()), app.consumer.topic_partitions(source_name))

    app.on_partitions_revoked.connect(on_revoked)
    app.on_partitions_assigned.connect(on_assigned)
    app.on_rebalance_complete.connect(on_rebalance_complete)

    @app.on_before_shutdown.connect
    async def _stop(sender, **kwargs) -> None:
        await worker.stop()

    serve_worker(stage, app, metrics, metrics_addr, worker.started, worker.commits.acks, worker.heartbeat)
    return app, worker


class ControlFeed:
    """This stage's StageConfigs on the compacted control topic, read from the start. :meth:`held`
    reads to the end the topic had when the worker started and returns them (the worker loads only
    the newest it accepts, ``StageWorker.start``); :meth:`follow` then offers each later one to the
    worker, forever. An invalid record (``slipstream.streams.control_rules``) is logged, counted and skipped;
    nothing a record holds is raised into these loops. With ``on_plan`` (the source stage's worker:
    its admission needs the plan's capacity, ``slipstream.streams.shedding``) every stage's StageConfigs and the
    TunerHandoffs are handed to it as well."""

    def __init__(self, pipe: Pipeline, stage: str, kafka: KafkaSettings, count_invalid, on_plan=None) -> None:
        self.pipe, self.stage, self.count, self.on_plan = pipe, stage, count_invalid, on_plan
        self.cons = kclient.consumer(kafka, group_id=None)
        self.tp = TopicPartition(topics.control(pipe.name), 0)

    async def start(self) -> None:
        await self.cons.start()

    async def held(self) -> list[StageConfig]:
        # the offsets first, then the partition: asked while its fetch long-polls, they would wait
        # behind it (``slipstream.streams.kafka.consumer``)
        end = (await self.cons.end_offsets([self.tp]))[self.tp]
        begin = (await self.cons.beginning_offsets([self.tp]))[self.tp]
        self.cons.assign([self.tp])
        found: list[StageConfig] = []
        if begin < end:
            async for msg in self.cons:
                if (rec := await self._config(msg)) is not None:
                    found.append(rec)
                if await self.cons.position(self.tp) >= end:
                    break
        return found

    async def follow(self, worker: StageWorker) -> None:
        try:
            async for msg in self.cons:
                if (rec := await self._config(msg)) is None:
                    continue
                try:
                    await worker.offer_config(rec)
                except Exception:  # a bug must not take the control loop (and the worker) down
                    log.exception("control record at %s[%d]@%d not applied", msg.topic, msg.partition, msg.offset)
        finally:
            await self.cons.stop()

    async def _config(self, msg) -> StageConfig | None:
        """The StageConfig of this stage ``msg`` holds, else None."""
        await codec.prefetch([msg.value])  # off the event loop when a registry is set
        try:
            mine = msg.key is None or msg.key == self.stage.encode()
            if not mine and self.on_plan is None:  # another stage's (or not UTF-8)
                check_key(msg.key)
                return None
            kind, rec = control_io.read_record(msg, self.pipe.name, self.pipe)
            if self.on_plan is not None:
                self.on_plan(kind, rec)
            return rec if kind == "StageConfig" and mine else None
        except InvalidControl as exc:
            control_io.skipped(msg, exc, self.count)
        except Exception as exc:  # a bug must not take the control loop (and the worker) down
            log.exception("control record at %s[%d]@%d not applied", msg.topic, msg.partition, msg.offset)
            control_io.skipped(msg, InvalidControl(f"{type(exc).__name__}: {exc}"), self.count)
        return None


def app_from_env() -> faust.App:
    """For `faust -A slipstream.agents.app worker`: the stage named by SLIPSTREAM_PIPELINE / SLIPSTREAM_STAGE."""
    from .zoo import load_executor

    pipe_file, stage = stage_from_env()
    if not pipe_file or not stage:
        sys.exit("set SLIPSTREAM_PIPELINE (a pipeline spec file) and SLIPSTREAM_STAGE (a stage name or 'join')")
    topics.use_prefixes(*prefixes_from_env())  # what the `slipstream` CLI does for its processes
    codec.use_registry(schema_registry_from_env())
    pipe = load_pipeline(pipe_file)
    kafka = KafkaSettings.from_env()
    addr = MetricsAddr.parse(metrics_addr_from_env(str(LOCAL)))
    if stage == JOIN:
        return build_join_app(pipe, kafka, metrics_addr=addr)[0]
    cache = cache_from_env()
    factory = (lambda v, h: load_executor(v, h, cache_dir=cache)) if cache else load_executor
    return build_stage_app(pipe, stage, kafka, factory, metrics_addr=addr)[0]


def __getattr__(name: str):  # `faust -A slipstream.agents.app` looks up `app` lazily, so importing is free
    if name == "app":
        return app_from_env()
    raise AttributeError(name)
