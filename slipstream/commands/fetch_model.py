"""`slipstream fetch-model`: fetch a model file and keep it only if its digest matches."""
from __future__ import annotations

import click


@click.command("fetch-model")
@click.option("--uri", required=True, help="http(s):// or file:// URI of the model file.")
@click.option("--sha256", required=True, help="Its sha256 (64 hex digits): the spec's params.digest.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Where to write it (params.path).")
def fetch_model_cmd(uri, sha256, out) -> None:
    """Fetch a model file and keep it only if its sha256 matches (the manifests' model init container)."""
    from slipstream.model_fetch import fetch

    try:
        fetch(uri, out, sha256)
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"fetched {uri} to {out} (sha256 {sha256.lower()})")


commands = [fetch_model_cmd]
