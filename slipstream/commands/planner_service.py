"""`slipstream planner`: the planner service — re-plan on an interval and publish StageConfigs."""
from __future__ import annotations

import asyncio
import json
import signal

import click

from slipstream.options import key_values, metrics_addr_option, profiles_option, renamed_option
from slipstream.streams.config import KafkaSettings

from slipstream.planner.modes import MODES


@click.command("planner")
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(exists=True, dir_okay=False))
@profiles_option()
@click.option("--mode", type=click.Choice(MODES), default="milp", show_default=True)
@renamed_option("--interval-s", "--interval", "interval_s", default=30.0, show_default=True,
                help="Seconds between re-plans.")
@renamed_option("--lookback-s", "--lookback", "lookback_s", default=120.0, show_default=True,
                help="Seconds of arrival history read at start.")
@click.option("--once", is_flag=True, help="Plan once from the history, publish, and exit.")
@click.option("--handoff", type=click.Path(dir_okay=False), default=None,
              help="Write the tuner plan (sample envelope, mu, rho, visit ratios) here after each change.")
@click.option("--explain", is_flag=True, help="Print why: binding constraints, rounds, runner-up.")
@click.option("--hardware", "pins", multiple=True,
              help="STAGE=HW: plan STAGE on hardware HW only (Kubernetes: a pod's hardware is fixed).")
@metrics_addr_option()
def planner_cmd(pipeline_file, profiles_dir, mode, interval_s, lookback_s, once, handoff, explain, pins,
                metrics_addr) -> None:
    """Re-plan from recent arrivals (forecast peak) and publish one StageConfig per stage on change."""
    from slipstream.planner.profiles import ProfileStore, problem_from_pipeline
    from slipstream.planner.results import LATE
    from slipstream.planner.run import run_planner
    from slipstream.planner.service import ReplanSettings, Replanner, explain as explain_lines, handoff_record
    from slipstream.streams.spec import load_pipeline
    from slipstream.tuner import planfile
    from slipstream.tuner.envelope import envelope

    pipe = load_pipeline(pipeline_file)
    store = ProfileStore(profiles_dir)
    base = pin_hardware(problem_from_pipeline(pipe, store, rate_qps=1.0),
                        key_values(pins, str, "--hardware", "STAGE=HW"))
    replanner = Replanner(base, pipe.name, ReplanSettings(mode=mode), envelope=envelope,
                          calibration=store.calibration)
    stepped: list[bool] = []  # /readyz: 200 after the first re-plan
    metrics, endpoint = _serve_metrics(pipe.name, metrics_addr, lambda: None if stepped else "no plan yet")

    def on_step(out, measured_p99_ms) -> None:
        p = out.plan
        metrics.observe(out)
        stepped.append(True)
        status = ("changed, published" if out.changed else "unchanged") + ("" if p.feasible else f"; {(p.notes or (p.reason,))[0]}")
        measured = "no results yet" if measured_p99_ms is None else f"{measured_p99_ms:.1f} ms"
        click.echo(f"forecast {out.forecast_qps:.1f} qps -> {p.mode} plan {status}; cost "
                   f"{p.cost_per_hour:.3f} $/h, p99 ({LATE}) predicted {p.p99_text()}, measured {measured}")
        for rec in out.configs:
            click.echo("  " + json.dumps({k: getattr(rec, k) for k in ("stage", "variant", "hardware", "max_batch",
                                                                        "replicas", "epoch")}))
        if explain:
            for line in explain_lines(p, replanner.runner_up(out), measured_p99_ms):
                click.echo(f"    {line}")
        if handoff and out.changed and out.handoff is not None:
            planfile.save(planfile.from_handoff(handoff_record(out.handoff, pipe.name, out.configs[0].epoch)),
                          pipe.name, handoff)
        if once:
            stop.set()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_planner(pipe, replanner, KafkaSettings.from_env(), interval_s=interval_s,
                          lookback_s=lookback_s, stop=stop, on_step=on_step,
                          on_invalid=metrics.control_invalid.labels(pipe.name).inc)

    stop = asyncio.Event()
    try:
        asyncio.run(main())
    finally:
        endpoint.close()


def pin_hardware(problem, pins):
    """``problem`` with each pinned stage's variants restricted to their profile on the pinned hardware."""
    from dataclasses import replace

    unknown = sorted(set(pins) - {s.name for s in problem.stages})
    if unknown:
        raise click.BadParameter(f"no stage {unknown}", param_hint="--hardware")
    stages = []
    for st in problem.stages:
        hw = pins.get(st.name)
        if hw is not None:
            variants = tuple(replace(v, latency={hw: v.latency[hw]}) for v in st.variants if hw in v.latency)
            if not variants:
                raise click.BadParameter(f"stage {st.name!r}: no variant has a profile on {hw!r}",
                                         param_hint="--hardware")
            st = replace(st, variants=variants)
        stages.append(st)
    return replace(problem, stages=tuple(stages))


def _serve_metrics(pipeline: str, addr, ready):
    from prometheus_client import CollectorRegistry

    from slipstream.planner.metrics import PlannerMetrics
    from slipstream.streams.metrics_http import serve, standard_collectors

    registry = CollectorRegistry()
    standard_collectors(registry)
    metrics = PlannerMetrics(pipeline, registry)
    endpoint = serve(addr, registry, ready)
    click.echo(f"slipstream-planner metrics={endpoint.addr}")
    return metrics, endpoint


commands = [planner_cmd]
