"""The options `slipstream chaos` and `slipstream soak` share (a fresh copy of a pipeline on the
local broker or cluster, with the planner service and the tuner)."""
from __future__ import annotations

import click

from slipstream.options import state_default

PIPELINE = "deploy/pipelines/dag-fanout.yaml"

common = [
    click.option("--pipeline", "pipeline_file", default=PIPELINE, show_default=True,
                 type=click.Path(exists=True, dir_okay=False),
                 help="Spec to copy under a fresh name (own topics and groups) for this run."),
    click.option("--brokers", default=1, show_default=True, type=click.IntRange(1, 9),
                 help="1: the single local broker (or SLIPSTREAM_BOOTSTRAP); 3: the local cluster "
                      "(`kafka up --brokers 3`), started if needed and stopped again if started here."),
    click.option("--profiles", "profiles_dir", default=state_default("profiles"), show_default="STATE_DIR/profiles"),
    click.option("--mode", default="milp", show_default=True, help="Planner mode of the plan and the planner service."),
    click.option("--replan-s", default=30.0, show_default=True, help="The planner service's interval."),
]


def fault_options(fn):
    """Decorate a fault-suite command with the shared options."""
    for opt in reversed(common):
        fn = opt(fn)
    return fn
