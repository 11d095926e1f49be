"""`slipstream validate`: check pipeline specs offline, or print their JSON Schema for editors."""
from __future__ import annotations

import json
import sys

import click

from slipstream.streams.spec import SpecError, json_schema


@click.command()
@click.argument("specs", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--schema", is_flag=True, help="Print the JSON Schema of a pipeline spec and exit "
              "(a copy: deploy/pipelines/pipeline.schema.json).")
def validate(specs: tuple[str, ...], schema: bool) -> None:
    """Check pipeline specs without Kafka: fields, types and bounds, unknown keys, the graph, model
    names and params against the zoo and plugins, ONNX files and their digests. Exit 1 on any problem."""
    from slipstream.specs import load_checked

    if schema:
        click.echo(json.dumps(json_schema(), indent=2))
        return
    if not specs:
        raise click.UsageError("name at least one spec file (or --schema)")
    bad = 0
    for path in specs:
        try:
            pipe = load_checked(path)
        except SpecError as exc:
            bad += 1
            click.echo(str(exc), err=True)
            continue
        click.echo(f"ok  {path}: pipeline {pipe.name!r}, {len(pipe.stages)} stage(s)")
    sys.exit(1 if bad else 0)


@click.command()
@click.option("--copy", "copy_to", type=click.Path(file_okay=False), default=None,
              help="Copy the example pipelines (and their JSON Schema) into this folder.")
def examples(copy_to: str | None) -> None:
    """List the example pipelines that ship with Slipstream (their paths), or copy them somewhere."""
    import shutil
    from pathlib import Path

    from slipstream.streams.assets import deploy_dir

    folder = deploy_dir() / "pipelines"
    files = sorted(folder.glob("*.yaml")) + [folder / "pipeline.schema.json"]
    if copy_to:
        Path(copy_to).mkdir(parents=True, exist_ok=True)
        files = [Path(shutil.copy(f, copy_to)) for f in files]
    for f in files:
        click.echo(str(f))


commands = [validate, examples]
