"""The one validating reader of Slipstream's input documents (pipeline specs, planning problems).

A document is described by pydantic models deriving from :class:`Doc`: strict types (no ``"4"`` for
4, no ``true`` for 1), bounds as ``Field`` constraints, and unknown keys refused with a "did you mean"
naming the closest known key (``difflib``). :func:`read` validates a document against such a model
and turns pydantic's errors into one message per problem, each naming the file, the field path
(``stages[1].defaults.max_batch``) and what was expected, the way the readers always reported them.
The same models export the JSON Schema that editors use (``slipstream validate --schema``).
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

D = TypeVar("D", bound="Doc")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or ``""`` when none is close."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Doc(BaseModel):
    """Base of every document model: frozen, strict, and unknown keys are errors naming the key."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            known = [f.alias or name for name, f in cls.model_fields.items()]
            for key in data:
                if key not in known:
                    raise PydanticCustomError(
                        "unknown_field", "unknown field{hint}; expected one of {known}",
                        {"key": key, "hint": did_you_mean(key, known), "known": sorted(known)})
        return data


def field_path(loc: Iterable[Any]) -> str:
    """``("stages", 1, "defaults", "max_batch")`` -> ``stages[1].defaults.max_batch``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _message(err: Mapping[str, Any]) -> str:
    loc = [p for p in err["loc"] if not (isinstance(p, str) and (p.startswith("function-") or p == "[key]"))]
    ctx = err.get("ctx") or {}
    if err["type"] == "unknown_field":
        loc.append(ctx["key"])
    if err["type"] == "missing":
        return f"{field_path(loc)}: required field is missing"
    got = "" if err["type"] == "unknown_field" else f", got {err['input']!r}"
    return f"{field_path(loc)}: {_expected(err)}{got}"


def _expected(err: Mapping[str, Any]) -> str:
    ctx, kind = err.get("ctx") or {}, err["type"]
    bounds = {"greater_than_equal": ">= {ge}", "less_than_equal": "<= {le}", "greater_than": "> {gt}",
              "less_than": "< {lt}"}
    if kind in bounds:
        return "expected a number " + bounds[kind].format(**ctx)
    if kind == "string_pattern_mismatch":
        return "expected a name of lowercase letters, digits and '-'"
    if kind == "literal_error":
        return f"expected {ctx['expected']}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length', 1)} item(s)"
    if kind in ("int_type", "int_from_float"):
        return "expected an integer"
    if kind in ("float_type", "int_parsing", "float_parsing"):
        return "expected a number"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "expected a mapping"
    if kind == "list_type":
        return "expected a list"
    if kind == "string_type":
        return "expected a string"
    return err["msg"][0].lower() + err["msg"][1:]


def load_document(path: str | Path, what: str, error: type[Exception], *, fmt: str) -> Any:
    """The parsed content of a ``fmt`` (``yaml`` or ``json``) document file; ``error`` naming the file
    when it is missing or does not parse (validate it with :func:`read`)."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise error(f"{p}: no such {what} file") from None
    try:
        return yaml.safe_load(text) if fmt == "yaml" else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise error(f"{p}: not valid {fmt.upper()}: {exc}") from None


def read(model: type[D], doc: Any, source: str, error: type[Exception]) -> D:
    """``doc`` validated as ``model``; else ``error`` whose message lists every problem as
    ``source: path: expectation``."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        lines = [f"{source}: " * bool(source) + _message(e) for e in exc.errors(include_url=False)]
        raise error("\n".join(dict.fromkeys(lines))) from None
