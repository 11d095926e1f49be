"""`slipstream bench ...`: benchmarks. Each prints raw figures and a ratio to a baseline measured in
the same run; none is part of the test suite."""
from __future__ import annotations

import json

import click

from slipstream.streams.config import KafkaSettings


@click.group("bench")
def bench() -> None:
    """Benchmarks (each prints raw numbers and a ratio to a named baseline)."""


@bench.command("dataplane")
@click.option("--requests", "n_latency", default=400, show_default=True, help="Requests per latency round.")
@click.option("--rate", default=100.0, show_default=True, help="Open-loop rate of the latency rounds (req/s).")
@click.option("--backlog", "n_throughput", type=int, default=None,
              help="Records per throughput round.  [default: slipstream.loadgen.bench.dataplane.BACKLOG, 30000]")
@click.option("--repeats", default=3, show_default=True, help="Rounds; medians are reported.")
@click.option("--json", "as_json", is_flag=True)
def dataplane(n_latency, rate, n_throughput, repeats, as_json) -> None:
    """Stage worker vs a plain aiokafka relay: added latency per hop and msgs/s (needs the broker)."""
    from slipstream.loadgen.bench import dataplane as bench_dataplane

    fig = bench_dataplane.run(KafkaSettings.from_env(), n_latency, rate, n_throughput or bench_dataplane.BACKLOG, repeats,
                              progress=lambda m: click.echo(m, err=True))
    click.echo(json.dumps(fig, indent=2) if as_json else bench_dataplane.format_report(fig))


@bench.command("executor")
@click.option("--runs", default=5, show_default=True)
@click.option("--payload", type=click.Choice(["raw", "png"]), default="raw", show_default=True)
@click.option("--checks", is_flag=True,
              help="Instead: a batch as a stage worker runs it (each payload checked as it is decoded) "
                   "against the run alone and against checking first, image-resize and lite0.")
def executor(runs, payload, checks) -> None:
    """The ONNX executor vs onnxruntime called directly, EfficientNet-Lite0, batch 1, 8 and 64."""
    from slipstream.loadgen.bench import executor as bench_executor

    if checks:
        click.echo(bench_executor.format_checks(bench_executor.bench_checks(runs=max(runs, 30))))
        return
    rows = bench_executor.bench_executor(runs=runs, payload=payload)
    click.echo(bench_executor.format_rows(rows))


@bench.command("drops")
@click.option("--runs", default=30, show_default=True)
@click.option("--batch", default=8, show_default=True, help="Requests per window.")
def drops(runs, batch) -> None:
    """CPU per dropped request against CPU per served one, image-classify's stages, in the worker's
    own code: dropped after decoding, and from the expiry header without decoding."""
    from slipstream.loadgen.bench import drops as bench_drops

    click.echo(bench_drops.format_rows(bench_drops.bench_drops(batch=batch, runs=runs)))


@bench.command("memory")
@click.option("--timeout", "timeout_s", default=600.0, show_default=True,
              help="Seconds a worker may take to be ready (a first start exports its model).")
def memory(timeout_s) -> None:
    """Resident memory of a ready worker of each kind the repo ships, and whether torch is loaded
    (needs the broker)."""
    from slipstream.loadgen.bench import memory as bench_memory

    rows = bench_memory.run(KafkaSettings.from_env(), timeout_s=timeout_s,
                            progress=lambda m: click.echo(m, err=True))
    click.echo(bench_memory.format_rows(rows))


# benchmarks of the other layers, each a click command in its own module
from slipstream.commands.bench_planner import planner_bench  # noqa: E402
from slipstream.commands.bench_scaling import scaling_bench  # noqa: E402
from slipstream.commands.bench_tuner import tuner_bench  # noqa: E402
from slipstream.commands.bench_gateway import gateway_bench  # noqa: E402
from slipstream.commands.bench_goodput import goodput_bench  # noqa: E402

bench.add_command(tuner_bench)
bench.add_command(planner_bench)
bench.add_command(scaling_bench)
bench.add_command(gateway_bench)
bench.add_command(goodput_bench)

commands = [bench]
