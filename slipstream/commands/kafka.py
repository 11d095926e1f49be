"""`slipstream kafka up|down|status|logs`: the embedded local broker, or a replicated local cluster.

Without ``--brokers``/``--name`` the commands act on the single broker (127.0.0.1:19092, state
``STATE_DIR/kafka``, STATE_DIR from ``slipstream --state-dir``, default ``./.state``). With ``--brokers N`` (N > 1) or ``--name NAME`` they act on the cluster NAME (default
``cluster``): N brokers on 19094.. (``--port``) and, after them, the KRaft quorum's controller-only nodes
(``--controllers``, default 3; 0 makes every broker a voter), state ``STATE_DIR/kafka-NAME``; ``down`` stops exactly
that cluster's processes, by their PIDs.

``--kafka-version`` (or ``SLIPSTREAM_KAFKA_VERSION``) picks the Kafka release ``up`` starts, one of
``slipstream.streams.broker.versions.SUPPORTED`` (default ``DEFAULT_VERSION``); ``versions`` lists them.
"""
from __future__ import annotations

import json
import sys

import click

from slipstream.options import controllers_option, state_dir
from slipstream.streams import broker
from slipstream.streams.config import BOOTSTRAP_ENV, KAFKA_HOST_ENV, KAFKA_STATE_ENV, KAFKA_VERSION_ENV

state_opt = click.option("--state", envvar=KAFKA_STATE_ENV, default=None,
                         help="State folder for data, logs and PID files [default: STATE_DIR/kafka, or "
                              "STATE_DIR/kafka-NAME for a cluster].")
port_opt = click.option("--port", type=int, default=None,
                        help="Client port of node 1 (controller: +1; node i: +2(i-1)) [default: 19092, "
                             "a cluster 19094].")
brokers_opt = click.option("--brokers", type=click.IntRange(1, 9), default=None,
                           help="Run a replicated cluster of this many brokers (3: replication 3, min ISR 2) "
                                "[default: the single broker; for --name, what the cluster was made with].")
name_opt = click.option("--name", default=None, help=f"Cluster name [default: {broker.CLUSTER_NAME}].")
version_opt = click.option("--kafka-version", "version", envvar=KAFKA_VERSION_ENV, default=None,
                           type=click.Choice(broker.SUPPORTED),
                           help=f"Kafka release to start [default: {broker.DEFAULT_VERSION}].")
host_opt = click.option("--host", envvar=KAFKA_HOST_ENV, default=broker.LOOPBACK, show_default=True,
                        help="The single broker's client address, listened on and advertised (Kubernetes "
                             "pods on a bridge: its address; deploy/k8s/local-cluster.sh).")


def _target(state, port, brokers, name, version=None, host=broker.LOOPBACK, controllers=None):
    """The single broker, or the cluster that --brokers/--name name."""
    if (brokers is None or brokers == 1) and name is None:
        return broker.default_broker(state, port or broker.SINGLE_PORT, root=state_dir(), version=version, host=host)
    if host != broker.LOOPBACK:
        raise click.BadParameter("only the single broker takes another address", param_hint="--host")
    return broker.local_cluster(brokers, name, port, state, root=state_dir(), version=version, controllers=controllers)


def _fail(exc: Exception) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(1)


@click.group()
def kafka() -> None:
    """Run Apache Kafka (KRaft, loopback only) from Maven Central jars."""


@kafka.command()
@state_opt
@port_opt
@brokers_opt
@name_opt
@version_opt
@host_opt
@controllers_option()
@click.option("--timeout", default=180.0, show_default=True, help="Seconds to wait for readiness.")
def up(state, port, brokers, name, version, host, controllers, timeout) -> None:
    """Start the broker or cluster (idempotent) and wait for a metadata round trip listing every broker."""
    target = _target(state, port, brokers, name, version, host, controllers)
    try:
        if isinstance(target, broker.LocalCluster):
            broker.cluster_up(target, timeout_s=timeout, progress=click.echo)
            click.echo(f"{BOOTSTRAP_ENV}={target.bootstrap}")
        else:
            broker.up(target, timeout_s=timeout, progress=click.echo)
    except broker.BrokerError as exc:
        _fail(exc)


@kafka.command()
@state_opt
@port_opt
@brokers_opt
@name_opt
@host_opt
def down(state, port, brokers, name, host) -> None:
    """Stop the broker or cluster that `up` started, by its PIDs."""
    target = _target(state, port, brokers, name, host=host)
    if isinstance(target, broker.LocalCluster):
        broker.cluster_down(target, progress=click.echo)
    else:
        broker.down(target, progress=click.echo)


@kafka.command()
@state_opt
@port_opt
@brokers_opt
@name_opt
@host_opt
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(state, port, brokers, name, host, as_json) -> None:
    """Say whether the broker (every broker of the cluster) runs and answers; exit 1 when not."""
    target = _target(state, port, brokers, name, host=host)
    if isinstance(target, broker.LocalCluster):
        st = broker.cluster_status(target)
        line = (f"kafka cluster {st['name']!r}: {st['running']}/{len(st['nodes'])} nodes running "
                f"({st['brokers']} brokers, {st['controllers'] or 'no'} controller-only nodes), {st['listed']} "
                f"brokers listed by the metadata on {st['bootstrap']} (pids {[n['pid'] for n in st['nodes']]})")
        line += "".join(f"\n  node {n['node']} ({n['roles']}): {_version_line(n)}" for n in st["nodes"] if n["pid"])
    else:
        st = broker.status(target)
        ready = "ready" if st["ready"] else "not answering"
        line = f"kafka {st['process']}" + (f" (pid {st['pid']}), {ready} on {st['bootstrap']}" if st["pid"] else "")
        if st["pid"]:
            line += f"\n  {_version_line(st)}"
    click.echo(json.dumps(st) if as_json else line)
    sys.exit(0 if st["ready"] else 1)


def _version_line(st: dict) -> str:
    """The release of the running process's jars and what the broker itself answers (ApiVersions)."""
    if st.get("roles") == broker.CONTROLLER_ONLY:
        return f"Kafka {st.get('kafka_version') or '(unknown jars)'}: a controller (no client listener)"
    said = st.get("broker")
    answer = (f"the broker reports metadata.version {said['metadata_version']} (supports up to "
              f"{said['metadata_version_max']})" if said else "the broker did not answer ApiVersions")
    return f"Kafka {st.get('kafka_version') or '(unknown jars)'}: {answer}"


@kafka.command()
@click.option("--oldest", is_flag=True, help="Print only the oldest supported release.")
@click.option("--default", "default_only", is_flag=True, help="Print only the default release.")
def versions(oldest, default_only) -> None:
    """The Kafka releases `up` can start (newest first; the default marked)."""
    if oldest or default_only:
        click.echo(broker.OLDEST_VERSION if oldest else broker.DEFAULT_VERSION)
        return
    for v in broker.SUPPORTED:
        click.echo(v + ("  (default)" if v == broker.DEFAULT_VERSION else "")
                   + ("  (oldest supported)" if v == broker.OLDEST_VERSION else ""))


@kafka.command()
@state_opt
@port_opt
@brokers_opt
@name_opt
@host_opt
@click.option("--node", default=1, show_default=True, help="Which node's log, for a cluster.")
@click.option("-n", "--lines", default=50, show_default=True)
def logs(state, port, brokers, name, host, node, lines) -> None:
    """Print the end of the broker's server.log."""
    target = _target(state, port, brokers, name, host=host)
    b = target.nodes[node - 1] if isinstance(target, broker.LocalCluster) else target
    if not b.log_file.exists():
        _fail(broker.BrokerError(f"no log yet at {b.log_file}"))
    click.echo("\n".join(b.log_file.read_text(errors="replace").splitlines()[-lines:]))


commands = [kafka]
