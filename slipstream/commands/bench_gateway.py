"""`slipstream bench gateway` (registered by slipstream/commands/bench.py): latency the gateway adds
against the Python Kafka client on the same no-op pipeline, and requests/s of one gateway process."""
from __future__ import annotations

import json

import click

from slipstream.streams.config import KafkaSettings


@click.command("gateway")
@click.option("--requests", "n", default=400, show_default=True, help="Requests per latency round and path.")
@click.option("--rate", default=100.0, show_default=True, help="Open-loop rate of the latency rounds (req/s).")
@click.option("--repeats", default=3, show_default=True, help="Rounds per path; medians are reported.")
@click.option("--concurrency", default=64, show_default=True, help="Outstanding requests of the throughput run.")
@click.option("--seconds", default=10.0, show_default=True, help="Length of the throughput run.")
@click.option("--client-linger-ms", type=click.IntRange(min=0), default=None,
              help="The Kafka client's producer linger [default: the client's, 1 ms; the gateway's is 0].")
@click.option("--interleave/--one-after-the-other", default=True, show_default=True,
              help="Alternate the two paths request by request within a round, or run one, then the other.")
@click.option("--json", "as_json", is_flag=True)
def gateway_bench(n, rate, repeats, concurrency, seconds, client_linger_ms, interleave, as_json) -> None:
    """Gateway vs Python Kafka client, end to end on a no-op pipeline, and one gateway's requests/s
    (needs the broker)."""
    from slipstream.loadgen.bench import gateway as bench

    fig = bench.run(KafkaSettings.from_env(), n, rate, repeats, concurrency, seconds,
                    progress=lambda m: click.echo(m, err=True), client_linger_ms=client_linger_ms,
                    interleave=interleave)
    click.echo(json.dumps(fig, indent=2) if as_json else bench.format_report(fig))
