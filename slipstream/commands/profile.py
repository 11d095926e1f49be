"""`slipstream profile`: measure batch latency per (variant, hardware, batch size) into a profile
store, or import a published profile table (`slipstream profile import --csv PATH`)."""
from __future__ import annotations

import click

from slipstream.options import state_default


@click.group("profile", invoke_without_command=True)
@click.option("--pipeline", "pipeline_file", type=click.Path(exists=True, dir_okay=False), help="Pipeline spec YAML.")
@click.option("--out", "out_dir", default=state_default("profiles"), show_default="STATE_DIR/profiles",
              type=click.Path(file_okay=False), help="Profile store directory.")
@click.option("--batch-sizes", default="1,2,4,8,16,32", show_default=True)
@click.option("--warmup", default=5, show_default=True)
@click.option("--reps", default=50, show_default=True, help="Timed runs per batch size (p50/p99 kept).")
@click.option("--variant", "variants", multiple=True, help="Only these variants (repeatable).")
@click.option("--hardware", "hardware_names", multiple=True, help="Only these hardware entries (repeatable).")
@click.pass_context
def profile(ctx, pipeline_file, out_dir, batch_sizes, warmup, reps, variants, hardware_names) -> None:
    """Profile every variant of the pipeline on every hardware this machine has."""
    if ctx.invoked_subcommand is not None:
        return
    if not pipeline_file:
        raise click.UsageError("give --pipeline FILE (or use `slipstream profile import --csv PATH`)")
    from slipstream.agents.zoo import load_executor  # the data plane's executors, imported only here
    from slipstream.planner.profiler import ProfilerSettings, has_cuda, profile_into, runnable_hardware
    from slipstream.planner.profiles import ProfileStore
    from slipstream.streams.spec import SpecError, load_pipeline

    try:
        pipe = load_pipeline(pipeline_file)
    except SpecError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        sizes = tuple(int(x) for x in batch_sizes.split(","))
        settings = ProfilerSettings(sizes, warmup, reps)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--batch-sizes/--reps") from None
    hw = [h for h in runnable_hardware(pipe, has_cuda()) if not hardware_names or h.name in hardware_names]
    todo = [(v, h) for st in pipe.stages for v in st.variants if not variants or v.name in variants for h in hw]
    if not todo:
        raise click.ClickException("nothing to profile: no matching variant on hardware this machine has")
    profile_into(ProfileStore(out_dir), todo, load_executor, settings, show=True)


@profile.command("import")
@click.option("--csv", "csv_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Table in the layout of Loki's aggregate_profiled.csv.")
@click.option("--out", "out_dir", default=state_default("profiles"), show_default="STATE_DIR/profiles",
              type=click.Path(file_okay=False))
@click.option("--model", "models", multiple=True, help="Only these models (repeatable).")
def import_cmd(csv_path, out_dir, models) -> None:
    """Import published profiles (hardware this machine lacks) into the profile store."""
    from slipstream.planner.profiles import ProfileError, ProfileStore, import_csv

    try:
        profs = import_csv(csv_path, ProfileStore(out_dir), models=set(models) or None)
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"imported {len(profs)} profiles into {out_dir} "
               f"({len({p.variant for p in profs})} variants, {len({p.hardware for p in profs})} hardware types)")


commands = [profile]
