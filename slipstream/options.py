"""Small option parsers shared by the command modules."""
from __future__ import annotations

import click


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
