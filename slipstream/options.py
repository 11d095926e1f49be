"""Small option parsers shared by the command modules."""
from __future__ import annotations

from pathlib import Path

import click

from slipstream.streams.config import METRICS_ADDR_ENV


def controllers_option():
    """``--controllers``: a new local cluster's controller-only nodes (``kafka up``, ``chaos``)."""
    from slipstream.streams.broker import DEDICATED_CONTROLLERS

    return click.option("--controllers", type=click.IntRange(0, 5), default=None,
                        help="A new cluster's controller-only nodes, its KRaft voters (0: every broker is also a "
                             f"voter) [default: what the cluster was made with, else {DEDICATED_CONTROLLERS}].")


def key_values(values: tuple[str, ...], cast, name: str, what: str = "KEY=NUMBER") -> dict:
    """``("a=1", "b=2")`` -> ``{"a": cast("1"), ...}``; a bad item is a usage error naming the option."""
    out = {}
    for v in values:
        key, sep, num = v.partition("=")
        try:
            out[key] = cast(num)
        except ValueError:
            sep = ""
        if not sep or not key:
            raise click.BadParameter(f"expected {what}, got {v!r}", param_hint=name)
    return out


class MetricsAddrType(click.ParamType):
    name = "HOST:PORT"

    def convert(self, value, param, ctx):
        from slipstream.streams.metrics_http import MetricsAddr

        if isinstance(value, MetricsAddr):
            return value
        try:
            return MetricsAddr.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def metrics_addr_option():
    """``--metrics-addr`` (env SLIPSTREAM_METRICS_ADDR): where /metrics, /healthz and /readyz are served
    (docs/observability.md)."""
    return click.option("--metrics-addr", type=MetricsAddrType(), default="127.0.0.1:0", show_default=True,
                        envvar=METRICS_ADDR_ENV, show_envvar=True,
                        help="Serve /metrics, /healthz and /readyz here (port 0: any free port; containers: "
                             "0.0.0.0:9100).")


def state_dir() -> Path:
    """The state directory (``slipstream --state-dir``, env SLIPSTREAM_STATE_DIR, default ``./.state``):
    broker and registry data, builds, profiles, worker logs. Read once, by the root command."""
    from slipstream.streams.assets import DEFAULT_STATE_DIR

    ctx = click.get_current_context(silent=True)
    root = ctx.find_root().params.get("state_dir") if ctx else None
    return Path(root) if root else DEFAULT_STATE_DIR


def state_default(*parts: str):
    """A click default: ``STATE_DIR/parts`` (show it with ``show_default="STATE_DIR/..."``)."""
    return lambda: str(state_dir().joinpath(*parts))


def profiles_option(**kw):
    """``--profiles``: the planner's profile store, one default for every command."""
    return click.option("--profiles", "profiles_dir", default=state_default("profiles"),
                        show_default="STATE_DIR/profiles", type=click.Path(file_okay=False),
                        help="Profile store (slipstream profile).", **kw)


class RenamedOption(click.Option):
    """An option whose former spellings (``aliases``) still parse but are left out of ``--help``."""

    def __init__(self, *args, aliases: tuple[str, ...] = (), **kw) -> None:
        super().__init__(*args, **kw)
        self.aliases = aliases

    def get_help_record(self, ctx):
        shown, self.opts = self.opts, [o for o in self.opts if o not in self.aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def renamed_option(name: str, former: str, dest: str, **kw):
    """``name``, also accepted under its ``former`` spelling (hidden)."""
    return click.option(name, former, dest, cls=RenamedOption, aliases=(former,), **kw)
