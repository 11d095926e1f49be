"""The `slipstream` console script: one click group; subcommands live in ``slipstream.commands``."""
from __future__ import annotations

import importlib
import logging

import click

from slipstream.streams.config import STATE_DIR_ENV

# Each module in slipstream/commands/ exposes `commands: list[click.Command]`.
COMMAND_MODULES = ("kafka", "worker", "pipeline", "bench", "tuner", "up", "tuner_plan", "k8s_manifests", "fetch_model",
                   "plan", "profile", "planner_service", "loadgen", "simulate", "demo", "compare_live", "calibrate",
                   "estimate", "chaos", "soak", "chaos_tuner", "registry", "validate", "gateway", "reproduce")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="slipstream", prog_name="slipstream")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=".state", show_default=True,
              envvar=STATE_DIR_ENV, show_envvar=True,
              help="Where local state goes: broker and registry data and builds, profiles, worker logs.")
def main(verbose: int, state_dir: str) -> None:
    """Slipstream: multi-model inference pipelines over Kafka, inside a tail-latency SLO."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from slipstream.streams.codec import use_registry
    from slipstream.streams.config import prefixes_from_env, schema_registry_from_env
    from slipstream.streams.topics import use_prefixes

    try:
        use_prefixes(*prefixes_from_env())  # every process this CLI starts names topics and groups alike
        use_registry(schema_registry_from_env())  # and writes records in the same wire format
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


for _name in COMMAND_MODULES:
    for _cmd in importlib.import_module(f"slipstream.commands.{_name}").commands:
        main.add_command(_cmd)


if __name__ == "__main__":
    main()
