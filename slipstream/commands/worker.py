"""`slipstream worker`: run one stage worker (or a pipeline's join worker) in the foreground."""
from __future__ import annotations

import sys

import click

from slipstream.agents.join import MAX_CLOSED  # standard library only: cheap at the CLI's import
from slipstream.streams.app import AppSettings
from slipstream.streams.config import (COMMIT_INTERVAL_ENV, JOIN_MEMORY_ENV, MAX_REPLICAS_ENV, MEMBER_FILE_ENV,
                                       METRICS_ADDR_ENV, METRICS_PORT_ENV, PROFILES_ENV, KafkaSettings,
                                       cache_from_env, metrics_port_set)
from slipstream.options import metrics_addr_option
from slipstream.specs import load_checked
from slipstream.streams.spec import SpecError


@click.command()
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Pipeline spec (YAML).")
@click.option("--stage", required=True, help="Stage name, or 'join' for the fan-out join worker.")
@click.option("--web-port", type=int, default=None, help="Faust web server port [default: off].")
@metrics_addr_option()
@click.option("--max-replicas", type=click.IntRange(min=1), default=None, envvar=MAX_REPLICAS_ENV,
              help="Model replicas this worker may hold (replicas beyond it need more workers) "
                   "[default: this host's cores].")
@click.option("--profiles", "profiles_dir", default=None, envvar=PROFILES_ENV,
              type=click.Path(file_okay=False),
              help="The planner's profile store: latency predictors start from its numbers [default: from "
                   "the model's warm-up].")
@click.option("--commit-interval-s", type=click.FloatRange(min=0, min_open=True), default=AppSettings.commit_interval_s,
              show_default=True, envvar=COMMIT_INTERVAL_ENV,
              help="Seconds between faust's periodic offset commits (besides the commit at revocation).")
@click.option("--join-memory", type=click.IntRange(min=1), default=MAX_CLOSED, show_default=True,
              envvar=JOIN_MEMORY_ENV,
              help="Join worker: answered request ids it remembers at most (the oldest forgotten first; "
                   "~150 bytes each), besides its 15-minute bound.")
@click.option("--member-file", default=None, envvar=MEMBER_FILE_ENV, type=click.Path(dir_okay=False),
              help="Write this worker's consumer-group member ids here after every rebalance, for the "
                   "supervisor that removes them from the group when the worker dies "
                   "(slipstream.streams.members; the local supervisor sets it) [default: not written].")
@click.option("--loglevel", default="warn", show_default=True,
              type=click.Choice(["crit", "error", "warn", "info", "debug"]))
def worker(pipeline_file: str, stage: str, web_port: int | None, metrics_addr, max_replicas: int | None,
           profiles_dir: str | None, commit_interval_s: float, join_memory: int, member_file: str | None,
           loglevel: str) -> None:
    """Run one stage worker: consume the stage's input topic, batch, infer, route."""
    from slipstream.agents.app import JOIN, build_join_app, build_stage_app
    from slipstream.streams.procs import exit_with_parent
    from slipstream.streams.timeline import mark
    from slipstream.agents.zoo import load_executor

    exit_with_parent(on_lost=lambda: click.echo("slipstream-worker: the process that started this worker "
                                                "is gone: stopping", err=True))

    if metrics_port_set():
        raise click.UsageError(f"{METRICS_PORT_ENV} is not read: set {METRICS_ADDR_ENV}=HOST:PORT "
                               "(containers: 0.0.0.0:9100)")
    try:
        pipe = load_checked(pipeline_file)
        if stage != JOIN:
            pipe.stage(stage)
    except (SpecError, KeyError) as exc:
        raise click.UsageError(str(exc)) from None
    import asyncio

    from slipstream.streams import admin

    kafka = asyncio.run(admin.fit_session_timeout(KafkaSettings.from_env()))
    if stage == JOIN:
        app = build_join_app(pipe, kafka, web_port=web_port, metrics_addr=metrics_addr,
                             commit_interval_s=commit_interval_s, max_closed=join_memory)[0]
    else:
        cache = cache_from_env()
        factory = (lambda v, h: load_executor(v, h, cache_dir=cache)) if cache else load_executor
        from slipstream.streams.profile_store import ProfileStore

        app = build_stage_app(pipe, stage, kafka, factory, web_port=web_port, metrics_addr=metrics_addr,
                              max_replicas=max_replicas,
                              profiles=ProfileStore(profiles_dir) if profiles_dir else None,
                              commit_interval_s=commit_interval_s)[0]
    if member_file:
        from slipstream.streams.app import report_members

        report_members(app, member_file)
    argv = ["faust", "worker", "--loglevel", loglevel]
    argv += ["--without-web"] if web_port is None else ["--web-port", str(web_port)]
    sys.argv = argv
    mark("process-start")
    app.main()


commands = [worker]
