"""What a live run starts from: the pipeline, its profiles (measured here when missing), the trace
and the planning sample."""
from __future__ import annotations

import click


def prepare(pipeline_file: str, spec: str, seed: int, profiles_dir: str, plan_seconds: float | None):
    """The pipeline, its profiles, the trace and the planning sample (its first ``plan_seconds``)."""
    from ...planner.profiles import ProfileStore
    from ...streams.spec import load_pipeline
    from ..traces import trace_arrivals
    from ..traces import first_step_s
    from .run import profile_missing

    arrivals = trace_arrivals(spec, seed)
    plan_s = plan_seconds or first_step_s(spec)
    if plan_s is None:
        raise click.UsageError(f"--plan-seconds: trace {spec!r} has no step to plan before; say how much to plan on")
    pipe = load_pipeline(pipeline_file)
    store = ProfileStore(profiles_dir)
    profile_missing(pipe, store)
    return pipe, store, arrivals, arrivals[arrivals < plan_s]
