"""The options `slipstream demo` and `slipstream compare-live` share (a live run on this machine)."""
from __future__ import annotations

import click

from slipstream.options import state_default


def _host_ms_option(flag: str, help: str):
    """A host CPU figure in ms, 0 by default (nothing declared)."""
    return click.option(flag, default=0.0, show_default=True, type=click.FloatRange(min=0.0), help=help)


# also `slipstream estimate`'s: it replays finished runs with the values they had
request_cpu_ms_option = _host_ms_option(
    "--request-cpu-ms",
    "Host CPU ms per request beyond what the profiles and the calibration's free cores account for (the "
    "workers' decode, produce and fetch): the planner and the estimator add it per request the source "
    "admits (HostModel.request_cpu_ms). The 2-core s21 runs measured about 6.5 in all at windows of one; "
    "with --window-cpu-ms, this is only the part paid per request whatever the batches.")
window_cpu_ms_option = _host_ms_option(
    "--window-cpu-ms",
    "Host CPU ms per window a stage's worker takes beyond the model's (fetch, produce, commit), however "
    "many requests it holds: the estimator charges it per window it runs, the planner's host bound and the "
    "source gate once per stage a request visits (HostModel.window_cpu_ms). A request then costs "
    "--request-cpu-ms plus this per stage at windows of one, less as windows fill.")

common = [
    click.option("--pipeline", "pipeline_file", default="deploy/pipelines/image-classify.yaml", show_default=True,
                 type=click.Path(exists=True, dir_okay=False)),
    click.option("--plan-seconds", default=None, type=float,
                 help="The planner plans from this first part of the trace, the quiet phase before the "
                      "step (the tuner handles the rest) [default: a step trace's first at=; other "
                      "traces need it]."),
    click.option("--profiles", "profiles_dir", default=state_default("profiles"), show_default="STATE_DIR/profiles"),
    click.option("--activation-s", default=1.0, show_default=True,
                 help="Replica activation time for the tuner and estimator: a new replica loads and "
                      "warms beside serving (slipstream bench scaling); scale-down waits 3x it."),
    click.option("--max-replicas", default=2, show_default=True,
                 help="Per stage; also capped by this host's cores less --reserve-cores."),
    click.option("--reserve-cores", default=0.5, show_default=True,
                 help="Cores kept for the broker, load generator and control plane."),
    request_cpu_ms_option,
    window_cpu_ms_option,
    click.option("--replan-s", default=30.0, show_default=True,
                 help="The planner service re-plans from live arrivals this often during the run (0: never)."),
    click.option("--hop-ms", default=6.0, show_default=True,
                 help="Kafka transit from one stage to the next (produce to consume) that the estimator "
                      "adds; the default is above the p99 of one transit that `slipstream bench dataplane` "
                      "measured on the 2-core VM (its 'last transit to client' row: p50 2.5 ms, p99 5.4 ms)."),
    click.option("--pace-ceiling", default=3.0, show_default=True, type=click.FloatRange(min=1.0),
                 help="The most the tuner divides a stage's capacity by when its batches run slower than "
                      "the plan assumed (tuner/pace.py); 1 turns the pace off."),
    click.option("--seed", default=0, show_default=True),
    click.option("--calibrate", "calibrate", type=click.Choice(["auto", "always", "never"]), default="auto",
                 show_default=True, help="auto: a calibration run first when the profile store has no "
                 "calibration in force; always: one first in any case; never: plan with what is in force."),
]


def live_options(fn):
    """Decorate a live-run command with the shared options."""
    for opt in reversed(common):
        fn = opt(fn)
    return fn
