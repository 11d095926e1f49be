"""`slipstream up`: the pipeline's initial plan as local worker processes, with the tuner on top."""
from __future__ import annotations

import click

from slipstream.planner.modes import MODES
from slipstream.options import key_values, state_default
from slipstream.tuner_options import (STANDBY, pipeline_of, plan_of, read_sample, run_local, standby_option,
                                      tuner_config, tuner_only, tuner_options)
from slipstream.streams.config import KafkaSettings
from slipstream.tuner import planfile


@click.command("up")
@tuner_options
@click.option("--plan", "plan_file", default=None, type=click.Path(dir_okay=False),
              help="Tuner plan JSON; without it the spec's default replicas are run and the envelope of "
                   "--sample is the planned one.")
@click.option("--sample", default=None, type=click.Path(dir_okay=False),
              help="Sample arrival trace (seconds; .npy or one number per line) when there is no --plan.")
@click.option("--mu", multiple=True, help="STAGE=QPS single-replica throughput, when there is no --plan.")
@click.option("--profiles", "profiles_dir", default=None, type=click.Path(file_okay=False),
              help="Plan here first (planner mode --mode, from the profile store) for --trace, publish the "
                   "StageConfigs, and run that plan.")
@click.option("--trace", "trace_spec", default=None,
              help="With --profiles: the sample the planner plans for (a trace spec, docs/loadgen.md).")
@click.option("--mode", type=click.Choice(MODES), default="milp",
              show_default=True, help="With --profiles: the planner mode.")
@click.option("--replan-s", default=30.0, show_default=True,
              help="With --profiles: the planner service re-plans from live arrivals this often (0: never).")
@click.option("--log-dir", default=state_default("workers"), show_default="STATE_DIR/workers",
              help="Worker stdout/stderr logs.")
@standby_option(STANDBY)
def up_cmd(pipeline_file, activation_s, max_replicas, rho_mode, interval_s, lookback_s, metrics_addr,
           reserve_cores, plan_file, sample, mu, profiles_dir, trace_spec, mode, replan_s, log_dir, standby) -> None:
    """Run the pipeline's initial plan as local worker processes, with the tuner on top.

    The plan comes from the planner (--profiles and --trace: plan now, publish the StageConfigs and
    keep re-planning every --replan-s with the planner service), from a tuner plan file (--plan, e.g. written by `slipstream planner --handoff`), or from a sample
    trace and per-stage throughputs (--sample, --mu) with the spec's default replicas."""
    pipe = pipeline_of(pipeline_file)
    if profiles_dir:
        if not trace_spec:
            raise click.UsageError("--profiles needs --trace: the sample to plan for")
        from slipstream.planner.profiles import ProfileStore
        from slipstream.loadgen.traces import trace_arrivals
        from slipstream.loadgen.live.run import LiveOptions, control_plane, plan_and_publish

        settings, store = KafkaSettings.from_env(), ProfileStore(profiles_dir)
        opts = LiveOptions(mode=mode, activation_s=activation_s, max_replicas=max_replicas,
                           reserve_cores=reserve_cores, replan_s=replan_s)
        published = plan_and_publish(pipe, store, trace_arrivals(trace_spec, 0), opts, settings)
        run_local(pipe, pipeline_file, published.tuner_plan.planned_replicas, log_dir, reserve_cores,
            lambda actuator, cap: control_plane(pipe, published, store, opts, settings, actuator, cap),
            profiles=profiles_dir, standby=standby, kafka=settings)
        return
    if plan_file:
        plan = plan_of(plan_file, pipe)
    elif sample and mu:
        plan = planfile.plan_for_pipeline(pipe, read_sample(sample), key_values(mu, float, "--mu", "STAGE=NUMBER"))
    else:
        raise click.UsageError("give --profiles and --trace, or --plan, or --sample and --mu for every stage")
    config, settings = tuner_config(activation_s, max_replicas, rho_mode), KafkaSettings.from_env()
    run_local(pipe, pipeline_file, plan.planned_replicas, log_dir, reserve_cores,
        tuner_only(pipe, plan, config, settings, interval_s, lookback_s, metrics_addr), standby=standby, kafka=settings)


commands = [up_cmd]
