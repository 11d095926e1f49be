"""Typed records: one frozen, slotted dataclass per named Avro record of ``schemas/*.avsc``, built from
the parsed files when this module is imported. The field list, the field order and the defaults come
from the ``.avsc``; nothing here restates them, so a field added to a schema is a field of its class.

Every record of :data:`slipstream.schemas.NAMES` is a class here under its Avro name (``StageConfig``,
``InferenceRequest`` ...), and so is every record nested in one (``HopTiming``, and the hand-off's
``StageHandoff``, ``StageCapacity``, ``Rung``, ``HostShare``). Fields are keyword-only. Avro types map
to Python ones: ``string`` str, ``int``/``long`` int, ``float``/``double`` float, ``boolean`` bool,
``bytes``/``fixed`` bytes, an enum its symbol (str), an array a tuple, a map a dict, a union with
``null`` ``X | None``, a record its class.

``Cls.from_dict(d)`` builds one from the dict the codec decodes (nested records and arrays converted;
a key the schema lacks is an error, a missing one takes its default); ``obj.to_dict()`` is the dict
the codec encodes. ``slipstream.streams.codec.decode_typed`` and ``codec.encode`` use them.
"""
from __future__ import annotations

from dataclasses import MISSING, field, make_dataclass
from typing import Any, Callable, Mapping

from .. import schemas

PRIMITIVES = {"string": str, "int": int, "long": int, "float": float, "double": float, "boolean": bool,
              "bytes": bytes, "null": type(None)}
Convert = Callable[[Any], Any] | None  # None: the value is used as it is


class Record:
    """The base of every generated record class."""

    __slots__ = ()
    avro_name: str = ""
    avro_fields: tuple[str, ...] = ()
    _from: tuple[tuple[str, Convert], ...] = ()
    _to: tuple[tuple[str, Convert], ...] = ()
    _fast: Callable[[Mapping[str, Any]], Any]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]):
        """The record of ``d`` (the codec's decoded dict): every field given, by the class's fast path
        (:func:`_fast_from`); else field by field, defaults for missing ones, extra ones refused."""
        if len(d) == len(cls.avro_fields):
            try:
                return cls._fast(d)
            except KeyError:
                pass
        kw = {}
        for name, conv in cls._from:
            if name in d:
                v = d[name]
                kw[name] = v if conv is None or v is None else conv(v)
        if len(kw) != len(d):
            extra = sorted(set(d) - set(cls.avro_fields))
            raise ValueError(f"{cls.avro_name}: fields not in its schema: {', '.join(map(str, extra))}")
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for name, conv in self._to:
            v = getattr(self, name)
            out[name] = v if conv is None or v is None else conv(v)
        return out


def build(doc: Mapping[str, Any], classes: dict[str, type] | None = None) -> dict[str, type]:
    """The record classes a schema document defines (itself and the records nested in it), added to
    ``classes`` (Avro short name -> class; names already there are reused, as Avro's named types are)."""
    classes = {} if classes is None else classes
    _kind(schemas.expanded(dict(doc)), classes)
    return classes


def _kind(t: Any, classes: dict[str, type]) -> tuple[Any, Convert, Convert]:
    """(annotation, dict -> value converter, value -> dict converter) of an Avro type."""
    if isinstance(t, str):
        if t in PRIMITIVES:
            return PRIMITIVES[t], None, None
        cls = classes[t.rsplit(".", 1)[-1]]  # a named type defined earlier
        return (cls, cls.from_dict, cls.to_dict) if isinstance(cls, type) and issubclass(cls, Record) else (str, None, None)
    if isinstance(t, list):
        members = [_kind(m, classes) for m in t if m != "null"]
        if len(members) != 1:
            return Any, None, None
        ann, to_obj, to_dict = members[0]
        return (ann | None) if "null" in t else ann, to_obj, to_dict
    kind = t["type"]
    if kind == "record":
        cls = _record(t, classes)
        return cls, cls.from_dict, cls.to_dict
    if kind == "enum":
        classes[t["name"]] = str
        return str, None, None
    if kind == "fixed":
        return bytes, None, None
    if kind == "array":
        ann, a, b = _kind(t["items"], classes)
        return (tuple[ann, ...], tuple if a is None else (lambda v: tuple(map(a, v))),
                list if b is None else (lambda v: list(map(b, v))))
    if kind == "map":
        ann, a, b = _kind(t["values"], classes)
        return (dict[str, ann], None if a is None else (lambda v: {k: a(x) for k, x in v.items()}),
                None if b is None else (lambda v: {k: b(x) for k, x in v.items()}))
    return _kind(kind, classes)  # {"type": "string"} and the like


def _record(doc: Mapping[str, Any], classes: dict[str, type]) -> type:
    short = doc["name"].rsplit(".", 1)[-1]
    if short in classes:
        return classes[short]
    specs, conv_from, conv_to = [], [], []
    for f in doc["fields"]:
        ann, a, b = _kind(f["type"], classes)
        specs.append((f["name"], ann, _default(f, a)))
        conv_from.append((f["name"], a))
        conv_to.append((f["name"], b))
    ns = {"avro_name": short, "avro_fields": tuple(n for n, _, _ in specs), "_from": tuple(conv_from),
          "_to": tuple(conv_to), "__doc__": doc.get("doc") or f"The {short} record (schemas/*.avsc)."}
    cls = make_dataclass(short, specs, bases=(Record,), namespace=ns, frozen=True, slots=True, kw_only=True)
    cls.__module__ = __name__
    cls._fast = staticmethod(_fast_from(cls, conv_from))
    cls.__init__, cls.to_dict = _fast_init(cls, specs), _fast_to(conv_to)
    classes[short] = cls
    return cls


def _fast_from(cls: type, convs: list[tuple[str, Convert]]) -> Callable[[Mapping[str, Any]], Any]:
    """``d -> cls`` for a dict holding every field (KeyError otherwise), generated for ``cls``: its slots
    set straight from ``d`` (a frozen dataclass's ``__init__`` sets each through ``object.__setattr__``,
    several times slower; this is the path every decoded record takes)."""
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = ["def fast(d):", "    o = _new(_cls)"]
    for i, (name, conv) in enumerate(convs):
        env[f"_s{i}"] = getattr(cls, name).__set__
        if conv is None:
            lines.append(f"    _s{i}(o, d[{name!r}])")
        else:
            env[f"_c{i}"] = conv
            lines += [f"    v = d[{name!r}]", f"    _s{i}(o, v if v is None else _c{i}(v))"]
    exec("\n".join(lines + ["    return o"]), env)  # noqa: S102 - built from the schema's field names
    return env["fast"]


def _fast_init(cls: type, specs: list) -> Callable[..., None]:
    """``cls.__init__`` generated like :func:`_fast_from`: the same keyword-only signature and defaults
    as the dataclass's own, each slot set straight (every record a worker routes out is built here)."""
    env: dict[str, Any] = {"_MISSING": MISSING}
    params, lines = [], []
    for i, (name, _, f) in enumerate(specs):
        env[f"_s{i}"] = getattr(cls, name).__set__
        if f.default is not MISSING:
            env[f"_d{i}"] = f.default
            params.append(f"{name}=_d{i}")
        elif f.default_factory is not MISSING:
            env[f"_f{i}"] = f.default_factory
            params.append(f"{name}=_MISSING")
            lines.append(f"    {name} = _f{i}() if {name} is _MISSING else {name}")
        else:
            params.append(name)
        lines.append(f"    _s{i}(self, {name})")
    exec(f"def __init__(self, *, {', '.join(params)}):\n" + "\n".join(lines or ["    pass"]), env)  # noqa: S102
    env["__init__"].__qualname__ = f"{cls.__name__}.__init__"
    return env["__init__"]


def _fast_to(convs: list[tuple[str, Convert]]) -> Callable[[Any], dict[str, Any]]:
    """``to_dict`` generated for a class: one dict display, converters only where a field has one."""
    env: dict[str, Any] = {}
    items = []
    for i, (name, conv) in enumerate(convs):
        if conv is None:
            items.append(f"{name!r}: self.{name}")
        else:
            env[f"_c{i}"] = conv
            items.append(f"{name!r}: None if self.{name} is None else _c{i}(self.{name})")
    exec("def to_dict(self):\n    return {" + ", ".join(items) + "}", env)  # noqa: S102 - the schema's field names
    return env["to_dict"]


def _default(f: Mapping[str, Any], to_obj: Convert):
    """The dataclass field of an Avro field: its default converted like a decoded value (a dict
    default by factory, as dataclasses want for a mutable one); required without one."""
    if "default" not in f:
        return field()
    value = f["default"]
    value = value if to_obj is None or value is None else to_obj(value)
    if isinstance(value, (dict, list)):
        return field(default_factory=lambda v=value: type(v)(v))
    return field(default=value)


CLASSES: dict[str, type] = {}
for _name in schemas.NAMES:
    build(schemas.raw(_name), CLASSES)
CLASSES = {k: v for k, v in CLASSES.items() if v is not str}  # enums stay str, not classes
globals().update(CLASSES)
__all__ = ["CLASSES", "Record", "build", *sorted(CLASSES)]


def of(name: str) -> type:
    """The class of record ``name`` (a KeyError naming the known ones when there is none)."""
    try:
        return CLASSES[name]
    except KeyError:
        raise KeyError(f"unknown record {name!r}; known: {', '.join(sorted(CLASSES))}") from None
