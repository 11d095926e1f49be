"""`slipstream bench tuner` (registered by slipstream/commands/bench.py): envelope update cost against
baselines, and measured activation time."""
from __future__ import annotations

import json
import os
import shlex
import sys

import click

from slipstream.streams import broker
from slipstream.streams.config import KafkaSettings
from slipstream.streams.spec import SpecError, load_pipeline
from slipstream.loadgen.bench import tuner as tb
from slipstream.streams.procs import worker_argv


@click.command("tuner")
@click.option("--windows", "n_windows", default=10, show_default=True, help="Envelope window sizes.")
@click.option("--rate", default=5000.0, show_default=True, help="Arrival rate of the synthetic trace (qps).")
@click.option("--seconds", default=75.0, show_default=True, help="Trace length (> 60 s: the largest window fills).")
@click.option("--chunk", default=500, show_default=True, help="Arrivals per tracker update (one fetch).")
@click.option("--runs", default=5, show_default=True, help="Repetitions; the median is reported.")
@click.option("--pipeline", "pipeline_file", type=click.Path(dir_okay=False), default=None,
              help="Pipeline spec for the activation run (`slipstream worker --pipeline FILE --stage NAME`).")
@click.option("--stage", default=None, help="Stage to start [default: the source stage].")
@click.option("--worker-cmd", default=None,
              help="Any command that prints the ready line, instead of `slipstream worker ...`.")
@click.option("--probe", is_flag=True,
              help="Time a bare consumer-group member (slipstream.loadgen.bench.probe_worker) instead of a worker: the Kafka "
                   "part of activation, a lower bound.")
@click.option("--existing", default=1, show_default=True,
              help="Workers already running, so the timed one joins with a rebalance.")
@click.option("--activation-runs", default=3, show_default=True)
@click.option("--timeout", default=120.0, show_default=True, help="Seconds to wait for a ready line.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def tuner_bench(n_windows, rate, seconds, chunk, runs, pipeline_file, stage, worker_cmd, probe, existing,
                activation_runs, timeout, as_json) -> None:
    """Envelope ns/arrival vs baselines, and worker activation time (needs the broker)."""
    rows = tb.envelope_cost(n_windows=n_windows, rate_qps=rate, seconds=seconds, chunk=chunk, runs=runs)
    act, note = None, ""
    settings = KafkaSettings.from_env()
    if worker_cmd:
        argv = shlex.split(worker_cmd)
    elif probe:
        argv = _probe_argv(settings)
    elif pipeline_file:
        try:
            pipe = load_pipeline(pipeline_file)
        except SpecError as exc:
            raise click.BadParameter(str(exc), param_hint="--pipeline") from None
        argv = worker_argv(pipeline_file, stage or pipe.source)
    else:
        argv = None
        note = "activation: skipped (give --pipeline FILE, or --worker-cmd)"
    if argv is not None:
        if not worker_cmd and not broker.is_ready(settings.bootstrap):
            note = (f"activation: needs the broker; none answers on {settings.bootstrap} "
                    "(run `slipstream kafka up` or set SLIPSTREAM_BOOTSTRAP)")
        else:
            act = tb.activation_time(argv, runs=activation_runs, existing=existing, timeout_s=timeout,
                                     env=dict(os.environ))
    if as_json:
        out = tb.as_dict(rows, act)
        out["params"] = dict(windows=n_windows, rate=rate, seconds=seconds, chunk=chunk, runs=runs,
                             existing=existing, argv=argv)
        if note:
            out["note"] = note
        click.echo(json.dumps(out, indent=2))
        return
    m = tb.machine()
    click.echo(f"commit {m['commit']}  host {m['host']}  cpus {m['cpus']}  python {m['python']}")
    click.echo(f"envelope update, {n_windows} windows, {rate:g} qps CV^2=4 trace, {seconds:g} s, "
               f"median of {runs}:")
    for r in rows:
        click.echo(f"  {r.method:<28} {r.ns_per_arrival:>10.0f} ns/arrival   x{r.ratio_to_tracker:.3g} of tracker")
    if act is not None:
        if act.ok:
            click.echo(f"activation ({existing} running, {activation_runs} joins): median {act.median_s:.2f} s, "
                       f"max {act.max_s:.2f} s, runs {[round(s, 2) for s in act.seconds]}, "
                       f"partitions {act.partitions}  argv: {' '.join(argv)}")
        else:
            click.echo(f"activation: FAILED: {act.error}")
    if note:
        click.echo(note)


def _probe_argv(settings: KafkaSettings) -> list[str] | None:
    import asyncio
    import uuid

    from slipstream.streams import admin
    from slipstream.streams.topics import TopicSpec

    if not broker.is_ready(settings.bootstrap):
        return [sys.executable, "-m", "slipstream.loadgen.bench.probe_worker"]  # reported as "needs the broker" below
    topic = "slipstream.bench.probe"
    asyncio.run(admin.ensure_topics(settings, [TopicSpec(topic, 8)]))
    return [sys.executable, "-m", "slipstream.loadgen.bench.probe_worker", "--topic", topic, "--group",
            f"slipstream-bench-probe-{uuid.uuid4().hex[:8]}", "--bootstrap", settings.bootstrap]


# `slipstream bench` (slipstream/commands/bench.py) adds `tuner_bench` as its `tuner` subcommand.
commands: list = []
