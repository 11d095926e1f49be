"""`slipstream kafka up|down|status|logs`: the embedded local broker."""
from __future__ import annotations

import json
import sys

import click

from streams import broker

state_opt = click.option("--state", envvar="SLIPSTREAM_STATE_KAFKA", default=None,
                         help="State folder for data, logs and the PID file [default: .state/kafka].")
port_opt = click.option("--port", default=19092, show_default=True, help="Client port (controller: +1).")


def _fail(exc: Exception) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(1)


@click.group()
def kafka() -> None:
    """Run Apache Kafka (KRaft, loopback only) from Maven Central jars."""


@kafka.command()
@state_opt
@port_opt
@click.option("--timeout", default=120.0, show_default=True, help="Seconds to wait for readiness.")
def up(state, port, timeout) -> None:
    """Start the broker (idempotent) and wait for a metadata round trip."""
    try:
        broker.up(broker.default_broker(state, port), timeout_s=timeout, progress=click.echo)
    except broker.BrokerError as exc:
        _fail(exc)


@kafka.command()
@state_opt
@port_opt
def down(state, port) -> None:
    """Stop the broker that `up` started, by its PID."""
    broker.down(broker.default_broker(state, port), progress=click.echo)


@kafka.command()
@state_opt
@port_opt
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(state, port, as_json) -> None:
    """Say whether the broker runs and answers; exit 1 when it does not."""
    st = broker.status(broker.default_broker(state, port))
    if as_json:
        click.echo(json.dumps(st))
    else:
        ready = "ready" if st["ready"] else "not answering"
        click.echo(f"kafka {st['process']}" + (f" (pid {st['pid']}), {ready} on {st['bootstrap']}"
                                              if st["pid"] else ""))
    sys.exit(0 if st["ready"] else 1)


@kafka.command()
@state_opt
@port_opt
@click.option("-n", "--lines", default=50, show_default=True)
def logs(state, port, lines) -> None:
    """Print the end of the broker's server.log."""
    b = broker.default_broker(state, port)
    if not b.log_file.exists():
        _fail(broker.BrokerError(f"no log yet at {b.log_file}"))
    click.echo("\n".join(b.log_file.read_text(errors="replace").splitlines()[-lines:]))


commands = [kafka]
