"""The Kafka a fault run uses (``slipstream chaos``, ``slipstream soak``), and how to restart its brokers."""
from __future__ import annotations

from dataclasses import dataclass

import click

from ...streams import broker
from ...streams.config import bootstrap_from_env


@dataclass(frozen=True)
class Cluster:
    """The Kafka a run uses, and how to restart its brokers (None: not ours to restart)."""

    bootstrap: str
    single: broker.LocalBroker | None = None
    local: broker.LocalCluster | None = None

    @property
    def brokers(self) -> int:
        return self.local.brokers if self.local else 1


def use_cluster(brokers: int, port: int | None = None, state: str | None = None,
                controllers: int | None = None) -> tuple[Cluster, bool]:
    """The single local broker (``brokers`` == 1; SLIPSTREAM_BOOTSTRAP wins if set and no ``port`` is
    given) or the local cluster of ``brokers`` (and ``controllers``: ``broker.local_cluster``); on ``port``
    and in ``state`` when given (a Kafka of the run's own, apart from a shared one); started if needed. Returns it and whether it was started here."""
    if brokers > 1:
        c = broker.local_cluster(brokers, port=port, state=state, controllers=controllers)
        started = any(broker.running_pid(b) is None for b in c.nodes)
        broker.cluster_up(c, progress=click.echo)
        return Cluster(c.bootstrap, local=c), started
    b = broker.default_broker(state, port or broker.SINGLE_PORT)
    env = bootstrap_from_env()
    if env and port is None:  # a broker this command may restart only if `kafka up` of this checkout runs it
        return (Cluster(env, single=b) if env == b.bootstrap and broker.running_pid(b) else Cluster(env)), False
    started = broker.running_pid(b) is None
    broker.up(b, progress=click.echo)
    return Cluster(b.bootstrap, single=b), started
