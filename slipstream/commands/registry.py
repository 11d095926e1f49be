"""`slipstream registry up|down|status`: a local Confluent-compatible schema registry (Apicurio Registry,
built from Maven Central by ``deploy/registry/pom.xml``) on 127.0.0.1:18081, in-memory. Set
``SLIPSTREAM_SCHEMA_REGISTRY_URL`` to the URL ``up`` prints to write the Confluent wire format."""
from __future__ import annotations

import json
import sys

import click

from slipstream.options import state_dir
from slipstream.streams import registry_server as rs
from slipstream.streams.config import SCHEMA_REGISTRY_ENV


def _registry(port: int) -> rs.LocalRegistry:
    return rs.LocalRegistry(state_dir=state_dir() / "registry", port=port)

port_opt = click.option("--port", type=int, default=rs.PORT, show_default=True, help="HTTP port (loopback).")


@click.group()
def registry() -> None:
    """Run a local schema registry (Apicurio, Confluent-compatible API) for the Confluent wire format."""


@registry.command()
@port_opt
@click.option("--timeout", default=300.0, show_default=True, help="Seconds to wait (a first build included).")
def up(port, timeout) -> None:
    """Build if needed, start (idempotent) and wait until ready; prints the URL to use."""
    r = _registry(port)
    try:
        rs.up(r, timeout_s=timeout, progress=click.echo)
    except (rs.RegistryServerError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"{SCHEMA_REGISTRY_ENV}={r.url}")


@registry.command()
@port_opt
def down(port) -> None:
    """Stop the registry `up` started (by its PID)."""
    rs.down(_registry(port), progress=click.echo)


@registry.command()
@port_opt
def status(port) -> None:
    """Process and readiness, as JSON; exit 1 unless ready."""
    st = rs.status(_registry(port))
    click.echo(json.dumps(st))
    sys.exit(0 if st["ready"] else 1)


commands = [registry]
