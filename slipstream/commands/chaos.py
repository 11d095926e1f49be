"""`slipstream chaos`: the fault suite (``slipstream.loadgen.faults.chaos_run``)."""
from __future__ import annotations

import click

from slipstream.fault_options import fault_options
from slipstream.options import controllers_option
from slipstream.tuner_options import standby_option


@click.command()
@fault_options
@click.option("--trace", default="poisson:rate=6,duration=40", show_default=True,
              help="The open-loop replay of every case (docs/loadgen.md).")
@click.option("--fault-at", "fault_at_s", default=10.0, show_default=True, help="Seconds after the first send.")
@click.option("--broker-down-s", default=5.0, show_default=True, help="A killed broker is restarted after this.")
@click.option("--freeze-s", default=None, type=float,
              help="SIGSTOP length [default: the workers' session timeout + 5 s].")
@click.option("--freeze-stage", default=None, help="The stage frozen [default: the source stage].")
@click.option("--case", "only", multiple=True, help="Run only the cases whose name contains this (repeatable).")
@click.option("--drain-s", default=90.0, show_default=True, help="Wait this long for results after the last send.")
@click.option("--report", "report_dir", default=None, help="[default: reports/chaos-<brokers>b]")
@click.option("--port", type=int, default=None,
              help="Run on a Kafka of the run's own on this port (node 1's; started and stopped by the run), "
                   "apart from a shared broker the broker faults must not kill.")
@click.option("--kafka-state", default=None, help="State folder of that Kafka [default: .state/kafka or "
                                                   ".state/kafka-cluster].")
@click.option("--broker-node", default="busiest", show_default=True,
              help="The node the cluster fault kills: 'busiest' (the leader of most of the pipeline's "
                   "partitions), 'controller' (the active controller) or a node number.")
@controllers_option()
@standby_option(1)
def chaos(pipeline_file, brokers, profiles_dir, mode, replan_s, trace, fault_at_s, broker_down_s, freeze_s,
          freeze_stage, only, drain_s, report_dir, port, kafka_state, broker_node, controllers, standby) -> None:
    """Inject faults under an open-loop replay: kill -9 every stage worker, the join, the tuner and the
    planner service, SIGSTOP a worker past its session timeout, kill the broker (one of three with
    --brokers 3). Per case: requests, missing, duplicates, conflicting statuses, recovery time.
    SLIPSTREAM_PROCESSING=exactly-once runs every process with exactly-once processing."""
    from slipstream.loadgen.faults.chaos_run import FREEZE_S, ChaosOptions, run_suite

    run_suite(ChaosOptions(pipeline_file, trace, fault_at_s, brokers, broker_down_s, freeze_s or FREEZE_S,
                           freeze_stage, tuple(only), profiles_dir, report_dir or f"reports/chaos-{brokers}b",
                           mode, replan_s, drain_s, port=port, kafka_state=kafka_state, standby=standby,
                           broker_node=broker_node, controllers=controllers))


commands = [chaos]
