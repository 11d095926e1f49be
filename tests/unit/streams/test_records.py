"""The typed records follow the .avsc files: every record's class has the schema's fields in its order
with its defaults, a typed round trip through the codec gives back an equal object with the same bytes
as the dict it stands for, and a field added to a schema is a field of the class built from it."""
import copy
import dataclasses

import pytest

from slipstream import schemas
from slipstream.schemas import records
from slipstream.streams import codec


def avsc_records(doc, out=None) -> dict[str, dict]:
    """Avro short name -> record definition, for every record a schema document defines (read here
    from the JSON, not through ``records``)."""
    out = {} if out is None else out
    if isinstance(doc, list):
        for d in doc:
            avsc_records(d, out)
    elif isinstance(doc, dict):
        if doc.get("type") == "record":
            out.setdefault(doc["name"].rsplit(".", 1)[-1], doc)
            for f in doc["fields"]:
                avsc_records(f["type"], out)
        for key in ("items", "values", "type"):
            if isinstance(doc.get(key), (dict, list)):
                avsc_records(doc[key], out)
    return out


ALL = {}
for _n in schemas.NAMES:
    avsc_records(schemas.expanded(schemas.raw(_n)), ALL)


def sample(t, names):
    """A value of Avro type ``t`` (the dict the codec decodes)."""
    if isinstance(t, list):
        return sample(next(m for m in t if m != "null"), names)
    if isinstance(t, str):
        base = {"string": "x", "int": 3, "long": 2**40, "float": 0.5, "double": 1.25, "boolean": True,
                "bytes": b"\x00\xff"}
        return base[t] if t in base else sample(names[t.rsplit(".", 1)[-1]], names)
    kind = t["type"]
    if kind == "record":
        return {f["name"]: sample(f["type"], names) for f in t["fields"]}
    if kind == "enum":
        return t["symbols"][-1]
    if kind == "array":
        return [sample(t["items"], names), sample(t["items"], names)]
    if kind == "map":
        return {"k": sample(t["values"], names)}
    return sample(kind, names)


def test_every_record_of_the_schemas_has_a_class():
    assert set(records.CLASSES) == set(ALL)
    assert set(schemas.NAMES) <= set(records.CLASSES)


@pytest.mark.parametrize("name", sorted(ALL))
def test_a_class_has_its_schemas_fields_in_order_with_its_defaults(name):
    cls, doc = records.of(name), ALL[name]
    fields = dataclasses.fields(cls)
    assert [f.name for f in fields] == [f["name"] for f in doc["fields"]] == list(cls.avro_fields)
    for f, spec in zip(fields, doc["fields"]):
        if "default" not in spec:
            assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        else:
            got = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            want = spec["default"]
            assert got == (tuple(want) if isinstance(want, list) else want), f.name
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen and hasattr(cls, "__slots__")


@pytest.mark.parametrize("name", [n for n in schemas.NAMES if n != "HopTiming"])
def test_a_typed_round_trip_is_equal_and_writes_the_same_bytes(name):
    value = sample(ALL[name], ALL)
    obj = records.of(name).from_dict(value)
    data = codec.encode(name, obj)
    assert data == codec.encode(name, value)
    assert codec.decode_typed(name, data) == obj
    assert obj.to_dict() == codec.decode(name, data)


def test_nested_records_and_arrays_are_typed():
    req = records.InferenceRequest.from_dict(sample(ALL["InferenceRequest"], ALL))
    assert isinstance(req.hops, tuple) and isinstance(req.hops[0], records.HopTiming)
    handoff = records.TunerHandoff.from_dict(sample(ALL["TunerHandoff"], ALL))
    assert isinstance(handoff.capacity[0].ladder[0], records.Rung) and isinstance(handoff.host, records.HostShare)
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.request_id = "other"


def test_missing_fields_take_defaults_and_unknown_ones_are_refused():
    cfg = records.StageConfig.from_dict({k: v for k, v in sample(ALL["StageConfig"], ALL).items()
                                         if k not in ("routing", "reason")})
    assert cfg.routing == {} and cfg.reason == ""
    with pytest.raises(ValueError, match="StageConfig: fields not in its schema: colour"):
        records.StageConfig.from_dict({**cfg.to_dict(), "colour": "blue"})


def test_a_field_added_to_a_schema_is_a_field_of_its_class():
    doc = copy.deepcopy(schemas.raw("StageConfig"))
    doc["fields"].append({"name": "colour", "type": "string", "default": "blue"})
    cls = records.build(doc)["StageConfig"]
    assert cls.avro_fields == records.StageConfig.avro_fields + ("colour",)
    value = {**sample(ALL["StageConfig"], ALL), "colour": "red"}
    wide = codec.RecordCodec("StageConfig", schemas.parse(doc))
    obj = cls.from_dict(value)
    assert obj.colour == "red" and cls.from_dict(wide.decode(wide.encode(obj))) == obj
    assert cls.from_dict({k: v for k, v in value.items() if k != "colour"}).colour == "blue"
