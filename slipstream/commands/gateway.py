"""`slipstream gateway`: the HTTP front door of one pipeline (Open Inference Protocol V2, docs/gateway.md)."""
from __future__ import annotations

import asyncio
import signal
import time

import click

from slipstream.options import MetricsAddrType
from slipstream.streams.config import GATEWAY_ADDR_ENV, GATEWAY_GRPC_PORT_ENV, KafkaSettings
from slipstream.streams.spec import SpecError, load_pipeline


@click.command("gateway")
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Pipeline spec (YAML).")
@click.option("--addr", type=MetricsAddrType(), default="127.0.0.1:8080", show_default=True,
              envvar=GATEWAY_ADDR_ENV, show_envvar=True,
              help="Serve HTTP here (port 0: any free port; containers: 0.0.0.0:8080).")
@click.option("--grace-ms", type=click.FloatRange(min=0), default=500.0, show_default=True,
              help="Waited past a request's deadline for its result before answering 504.")
@click.option("--grpc-port", type=click.IntRange(0, 65535), default=None, envvar=GATEWAY_GRPC_PORT_ENV,
              show_envvar=True, help="Serve the protocol's gRPC GRPCInferenceService too, on this port of "
                                     "--addr's host (0: any free port).")
@click.option("--window-s", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              help="Recent outcomes the load-shedding rule reads.")
def gateway(pipeline_file: str, addr, grace_ms: float, grpc_port: int | None, window_s: float) -> None:
    """Serve a pipeline over HTTP: /v2/models/<pipeline>/infer, /v2/health/*, /metrics (and gRPC)."""
    from slipstream.gateway.server import READY_LINE, GatewayConfig, serve

    try:
        pipe = load_pipeline(pipeline_file)
        cfg = GatewayConfig(host=addr.host, port=addr.port, grace_ms=grace_ms, window_s=window_s, grpc_port=grpc_port)
    except (SpecError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(pipe, KafkaSettings.from_env(), cfg, stop, on_ready=lambda a, g: click.echo(
            READY_LINE.format(pipeline=pipe.name, addr=a, grpc=g or "-", at_ns=time.time_ns()), nl=True))

    import uvloop  # libuv's event loop: less of the gateway's time per request goes to the loop itself

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    except LookupError as exc:  # the pipeline's topics do not exist
        raise click.ClickException(str(exc)) from None


commands = [gateway]
