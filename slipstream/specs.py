"""Loading a pipeline spec at the CLI's edge with every offline check: the document's structure
(``slipstream.streams.spec``) and, where the zoo is visible, its models, params and ONNX files
(``slipstream.agents.spec_check``). Commands that start workers load through here, so a mistake is a usage error
before any process starts."""
from __future__ import annotations

import click

from slipstream.streams.spec import Pipeline, SpecError, load_pipeline


def load_checked(path: str) -> Pipeline:
    """The pipeline at ``path``; :class:`SpecError` listing every problem found."""
    from slipstream.agents.spec_check import check_models

    pipe = load_pipeline(path)
    problems = check_models(pipe)
    if problems:
        raise SpecError("\n".join(problems))
    return pipe


def load_or_fail(path: str, param_hint: str | None = None) -> Pipeline:
    """:func:`load_checked`, a problem being a click usage error (naming ``param_hint`` if given)."""
    try:
        return load_checked(path)
    except SpecError as exc:
        if param_hint:
            raise click.BadParameter(str(exc), param_hint=param_hint) from None
        raise click.UsageError(str(exc)) from None
