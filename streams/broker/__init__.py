"""The embedded brokers: Apache Kafka (KRaft, combined mode) on loopback, from Maven Central jars.

``slipstream kafka up|down|status|logs`` calls these. Jars come from ``deploy/kafka/pom.xml`` (``mvn
package`` copies the broker's runtime classpath to ``STATE_DIR/build/kafka-<version>/target/kafka-libs``);
data, logs and the PID file live in a git-ignored state folder. ``up`` is idempotent and waits for a metadata round
trip, not an open port; ``down`` stops only the processes ``up`` started, by their PIDs.

Two shapes, one node type (:class:`LocalBroker`):

- the single broker (``kafka up``): node 1 on 19092 (controller 19093), state ``.state/kafka``,
  replication factor 1;
- a replicated cluster (``kafka up --brokers 3``): nodes 1..n, node i on ``port + 2(i-1)`` (controller
  one above), 19094..19099 by default, all of them KRaft voters, state ``.state/kafka-<name>/node-<i>``
  (default name ``cluster``), internal topics with replication min(3, n) and min ISR min(2, n). The
  cluster's layout (brokers, base port, cluster id) is kept in ``cluster.json`` there, so ``down`` and
  ``status`` find it by name.

Every node runs one Kafka release of ``versions`` (the default, the supported ones; ``--kafka-version``
or ``SLIPSTREAM_KAFKA_VERSION``); each release's jars are built in a folder of their own.

The parts: ``versions`` (which releases, how each runs), ``layout`` (where nodes live), ``process`` (a
node's JVM, its PID), ``probe`` (asking a running broker, its version included), ``single`` and
``cluster`` (the two shapes' up, wait, down and status). The names
below are the package's interface; each is defined once, in its part.
"""
from .cluster import (active_controller, cluster_down, cluster_status, cluster_up, quorum_leader,
                                    start_node, wait_cluster, wait_in_sync)
from .layout import (CLUSTER_NAME, CLUSTER_PORT, CONTROLLER_ONLY, DEDICATED_CONTROLLERS, LOOPBACK, SINGLE_PORT,
                                              BrokerError, LocalBroker, LocalCluster, default_broker, local_cluster)
from .probe import broker_features, broker_version, is_ready, live_brokers
from .process import (KAFKA_DEPLOY, data_version, fetch_jars, render_config, running_jar_version,
                                    running_pid, start_process)
from .single import down, status, up, wait_ready
from .versions import DEFAULT_VERSION, OLDEST_VERSION, SUPPORTED, KafkaRelease, release

__all__ = ["CLUSTER_NAME", "CLUSTER_PORT", "CONTROLLER_ONLY", "DEDICATED_CONTROLLERS", "DEFAULT_VERSION", "KAFKA_DEPLOY", "LOOPBACK", "OLDEST_VERSION", "SINGLE_PORT",
           "SUPPORTED", "BrokerError", "KafkaRelease", "LocalBroker", "LocalCluster", "active_controller", "broker_features",
           "broker_version", "cluster_down", "cluster_status", "cluster_up", "data_version", "default_broker", "down",
           "fetch_jars", "is_ready", "live_brokers", "local_cluster", "quorum_leader", "release", "render_config", "running_jar_version",
           "running_pid", "start_node", "start_process", "status", "up", "wait_cluster", "wait_in_sync", "wait_ready"]
