"""`slipstream tuner-plan`: write the tuner plan the tuner reads, from a sample and throughputs."""
from __future__ import annotations

import click

from slipstream.options import key_values
from slipstream.tuner_options import pipeline_of, read_sample
from slipstream.tuner import planfile


@click.command("tuner-plan")
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(dir_okay=False))
@click.option("--sample", required=True, type=click.Path(dir_okay=False),
              help="Arrival times in seconds: .npy, or one number per line.")
@click.option("--mu", multiple=True, required=True, help="STAGE=QPS single-replica throughput (every stage).")
@click.option("--replicas", multiple=True, help="STAGE=N planned replicas [default: the spec's].")
@click.option("--service-time-ms", type=float, default=None,
              help="Smallest envelope window [default: longest path's sum of 1/mu, >= 10 ms].")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
def tuner_plan_cmd(pipeline_file, sample, mu, replicas, service_time_ms, output) -> None:
    """Write the tuner plan (sample envelope, mu, visit ratios, replicas) the tuner reads."""
    pipe = pipeline_of(pipeline_file)
    try:
        plan = planfile.plan_for_pipeline(pipe, read_sample(sample), key_values(mu, float, "--mu", "STAGE=NUMBER"),
                                          key_values(replicas, int, "--replicas", "STAGE=NUMBER"),
                                          service_time_ms / 1000 if service_time_ms else None)
    except (planfile.PlanFileError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    planfile.save(plan, pipe.name, output)
    click.echo(f"wrote {output}: mean {plan.mean_rate_qps:.1f} qps, windows {plan.envelope.windows_s[0]:g}.."
               f"{plan.envelope.windows_s[-1]:g} s, replicas {plan.planned_replicas}")


commands = [tuner_plan_cmd]
