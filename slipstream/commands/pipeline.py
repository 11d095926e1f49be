"""`slipstream topics` and `slipstream submit`: a pipeline's topics, and one request from the shell."""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from slipstream.streams import admin, topics
from slipstream.streams.config import GATEWAY_URL_ENV, KafkaSettings
from slipstream.specs import load_or_fail


pipeline_opt = click.option("--pipeline", "pipeline_file", required=True,
                            type=click.Path(exists=True, dir_okay=False), help="Pipeline spec (YAML).")


@click.command("topics")
@pipeline_opt
def topics_cmd(pipeline_file: str) -> None:
    """Create the pipeline's topics and list them. Existing ones keep their partitions; their record
    size limit (max.message.bytes) is set to the spec's ``max_message_bytes`` when it names one."""
    pipe = load_or_fail(pipeline_file)
    specs = topics.all_topics(pipe)
    settings = KafkaSettings.from_env()
    created = asyncio.run(admin.ensure_topics(settings, specs))
    resized = set(asyncio.run(admin.align_sizes(settings, [s for s in specs if s.name not in created])))
    for s in specs:
        state = "created" if s.name in created else "resized" if s.name in resized else "exists "
        size = s.config.get(admin.SIZE_KEY)
        click.echo(f"{state}  {s.name}  partitions={s.partitions}" + (f"  {admin.SIZE_KEY}={size}" if size else ""))


@click.command()
@pipeline_opt
@click.option("--input", "input_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="File whose bytes are the request payload.")
@click.option("--content-type", default=None, help="Payload content type [default: the pipeline's].")
@click.option("--accuracy-floor", type=float, default=None, help="Lowest acceptable variant accuracy.")
@click.option("--slo-ms", type=float, default=None, help="Deadline after creation [default: pipeline SLO].")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for the result.")
@click.option("--gateway", "gateway_url", default=None, metavar="URL", envvar=GATEWAY_URL_ENV,
              show_envvar=True, help="Go through the gateway at URL (e.g. http://127.0.0.1:8080) "
                                     "[default: straight to Kafka].")
def submit(pipeline_file, input_path, content_type, accuracy_floor, slo_ms, timeout, gateway_url) -> None:
    """Send one request and print its result as JSON (output decoded as text when it is text).
    Exit 0 done, 2 dropped or error, 1 no result (timeout, refused by the gateway: 429 shed, 400...)."""
    from aiohttp import ClientError

    from slipstream.gateway.client import GatewayError, connect

    pipe = load_or_fail(pipeline_file)
    payload = Path(input_path).read_bytes()

    async def go() -> dict:  # either client answers the InferenceResult
        async with connect(pipe, KafkaSettings.from_env(), gateway_url) as c:
            rid = await c.submit(payload, content_type=content_type, accuracy_floor=accuracy_floor,
                                 slo_ms=slo_ms)
            return (await c.result(rid, timeout)).to_dict()

    try:
        res = asyncio.run(go())
    except (TimeoutError, LookupError, GatewayError, ClientError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    out = res["output"]
    try:
        shown = json.loads(out) if res["content_type"] == "application/json" else out.decode()
    except (UnicodeDecodeError, ValueError):
        shown = f"<{len(out)} bytes {res['content_type']}>"
    res = {**res, "output": shown, "latency_ms": (res["finished_ns"] - res["created_ns"]) / 1e6}
    click.echo(json.dumps(res, indent=2, default=str))
    sys.exit(0 if res["status"] == "done" else 2)


commands = [topics_cmd, submit]
