"""The one rule set of the control topic: what a record must be before anyone applies it.

Every reader of the control topic (stage workers, planner, tuner, tools) takes its records through
``slipstream.streams.control_io.read_record``, which runs :func:`check_key` and :func:`check` here. A record that
breaks a rule raises :class:`InvalidControl` naming the field and the value; the reader logs it with
its topic/partition/offset, counts it (``slipstream_control_invalid``) and skips it. Nothing here
touches Kafka: the rules are pure functions of (key, record type, decoded value, pipeline spec).

The rules:

- key: UTF-8; a StageConfig's key is its stage, a TunerHandoff's ``topics.HANDOFF_KEY``;
- pipeline: the reader's; stage, variants (``variant``, ``routing``, ``digests``) and hardware known
  to the reader's pipeline spec (when the reader has one);
- numbers: finite, within the bounds below (the spec's own bounds where it has them);
- a TunerHandoff's numbers within sane ranges, so no reader's arithmetic overflows on them: a service
  rate (``mu_qps``) in (``MIN_RATE_QPS``, ``MAX_RATE_QPS``), any other rate 0 or in that range,
  windows in (0, ``MAX_WINDOW_S``], visit ratios up to ``MAX_VISIT_RATIO``, times up to ``MAX_MS``,
  accuracies in [0, 1], replicas and list lengths bounded; ``capacity`` and its ``ladder`` included;
- routing shares: each finite and >= 0, summing to more than 0 (they are normalised when applied);
- epoch: 0 <= epoch <= ``EPOCH_MAX``. The order of control records is their offset on the topic
  (``docs/guarantees.md``, "The control topic"); the written field is only checked, never added to.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Iterator, Mapping

from . import topics
from .spec import Pipeline

EPOCH_MAX = 2**53  # exact in a double (JSON readers, Prometheus gauges); offsets stay far below it
MAX_BATCH = 4096  # the spec's bounds (slipstream.streams.spec)
MAX_TIMEOUT_MS = 60_000.0
MAX_REPLICAS = 1024
MAX_PARTITIONS = 4096
MAX_STAGES = 1024  # entries of a hand-off
MAX_WINDOWS = 64
MIN_RATE_QPS = 1e-6  # a rate (requests or items per second) is above it (one in 11.6 days)...
MAX_RATE_QPS = 1e9  # ...and below it
MAX_WINDOW_S = 86_400.0
MAX_VISIT_RATIO = 1e6
MAX_MS = 1e9  # a budget or a batch's service time (11.6 days)
MAX_RUNGS = 256  # variants in a stage's ladder
MAX_CORES = 1e5  # a host's
KINDS = ("StageConfig", "TunerHandoff")


class InvalidControl(ValueError):
    """A control record that breaks a rule; the message names the field and the value."""


def check_key(key: bytes | None) -> str:
    """The key as text; it must be present and UTF-8."""
    if key is None:
        raise InvalidControl("key: missing (a control record is keyed by its stage)")
    try:
        return bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidControl(f"key: not UTF-8 (hex {bytes(key)[:40].hex(' ')})") from None


def check(kind: str, key: str, rec: Mapping[str, Any], pipeline: str, pipe: Pipeline | None = None) -> None:
    """Raise :class:`InvalidControl` unless ``rec`` (decoded as ``kind``) may be applied by a reader of
    ``pipeline``'s control topic (``pipe``: its spec, for the stage/variant/hardware rules)."""
    if kind not in KINDS:
        raise InvalidControl(f"record type: {kind!r} is not a control record ({', '.join(KINDS)})")
    if rec.get("pipeline") != pipeline:
        raise InvalidControl(f"pipeline: {rec.get('pipeline')!r}, not {pipeline!r}")
    _integer(rec, "epoch", 0, EPOCH_MAX)
    if kind == "StageConfig":
        _stage_config(key, rec, pipe)
    else:
        _handoff(key, rec, pipe)


def _stage_config(key: str, rec: Mapping[str, Any], pipe: Pipeline | None) -> None:
    if key != rec["stage"]:
        raise InvalidControl(f"key: {key!r} is not the record's stage {rec['stage']!r}")
    _integer(rec, "max_batch", 1, MAX_BATCH)
    _number(rec, "batch_timeout_ms", 0.0, MAX_TIMEOUT_MS)
    _integer(rec, "replicas", 1, MAX_REPLICAS)
    _integer(rec, "partitions", 1, MAX_PARTITIONS)
    _finite("cost_per_hour", rec.get("cost_per_hour", 0.0), 0.0, math.inf)
    if rec.get("predicted_p99_ms") is not None:
        _number(rec, "predicted_p99_ms", 0.0, math.inf)
    routing = rec.get("routing") or {}
    for variant, share in routing.items():
        _finite(f"routing[{variant!r}]", share, 0.0, math.inf)
    if routing and sum(routing.values()) <= 0:
        raise InvalidControl(f"routing: shares must sum to more than 0, got {dict(routing)}")
    if pipe is None:
        return
    stage = _stage(pipe, rec["stage"])
    known = {v.name for v in stage.variants}
    for field, names in (("variant", [rec["variant"]]), ("routing", routing), ("digests", rec.get("digests") or {})):
        for v in names:
            if v not in known:
                raise InvalidControl(f"{field}: unknown variant {v!r} (stage {stage.name} has {sorted(known)})")
    if rec["hardware"] not in pipe.hardware:
        raise InvalidControl(f"hardware: unknown {rec['hardware']!r} (catalog: {sorted(pipe.hardware)})")


def _handoff(key: str, rec: Mapping[str, Any], pipe: Pipeline | None) -> None:
    if key != topics.HANDOFF_KEY:
        raise InvalidControl(f"key: {key!r}, a TunerHandoff is keyed {topics.HANDOFF_KEY!r}")
    _rate("mean_rate_qps", rec["mean_rate_qps"], zero=True)
    windows, rates = rec["windows_s"], rec["rates_qps"]
    if not 0 < len(windows) <= MAX_WINDOWS or len(rates) != len(windows):
        raise InvalidControl(f"windows_s/rates_qps: 1 to {MAX_WINDOWS} windows with one rate each, got "
                             f"{len(windows)} and {len(rates)}")
    for i, (w, r) in enumerate(zip(windows, rates)):
        _finite(f"windows_s[{i}]", w, 0.0, MAX_WINDOW_S, low_open=True)
        _rate(f"rates_qps[{i}]", r, zero=True)
    _count("stages", rec["stages"], MAX_STAGES, least=1)
    for i, s in enumerate(rec["stages"]):
        if pipe is not None:
            _stage(pipe, s["stage"], f"stages[{i}].stage")
        _integer(s, "replicas", 0, MAX_REPLICAS, f"stages[{i}].")
        _rate(f"stages[{i}].mu_qps", s["mu_qps"])
        _finite(f"stages[{i}].visit_ratio", s["visit_ratio"], 0.0, MAX_VISIT_RATIO)
    capacity = rec.get("capacity") or []
    _count("capacity", capacity, MAX_STAGES)
    for i, c in enumerate(capacity):
        where = f"capacity[{i}]"
        if pipe is not None:
            _stage(pipe, c["stage"], f"{where}.stage")
        _finite(f"{where}.budget_ms", c["budget_ms"], 0.0, MAX_MS)
        _served(where, c)
        _count(f"{where}.ladder", c.get("ladder") or [], MAX_RUNGS)
        for j, r in enumerate(c.get("ladder") or []):
            _finite(f"{where}.ladder[{j}].accuracy", r["accuracy"], 0.0, 1.0)
            _finite(f"{where}.ladder[{j}].share", r["share"], 0.0, MAX_RATE_QPS)
            _served(f"{where}.ladder[{j}]", r)
    host = rec.get("host")
    if host is not None:
        _finite("host.free_cores", host["free_cores"], 0.0, MAX_CORES)
        _finite("host.request_cpu_ms", host["request_cpu_ms"], 0.0, MAX_MS)
        _finite("host.window_cpu_ms", host.get("window_cpu_ms", 0.0), 0.0, MAX_MS)


def _served(where: str, rec: Mapping[str, Any]) -> None:
    """What a capacity entry or a ladder rung says is served: a rate (0: none), one per window (at most
    ``MAX_WINDOWS``), a batch service time per batch size (at most ``MAX_BATCH``)."""
    _rate(f"{where}.rate_qps", rec["rate_qps"], zero=True)
    _count(f"{where}.window_qps", rec["window_qps"], MAX_WINDOWS)
    for k, x in enumerate(rec["window_qps"]):
        _rate(f"{where}.window_qps[{k}]", x, zero=True)
    _count(f"{where}.service_ms", rec.get("service_ms") or [], MAX_BATCH)
    for k, x in enumerate(rec.get("service_ms") or []):
        _finite(f"{where}.service_ms[{k}]", x, 0.0, MAX_MS)
    _finite(f"{where}.cpu_ms_per_item", rec.get("cpu_ms_per_item", 0.0), 0.0, MAX_MS)


def _count(field: str, items: Any, most: int, least: int = 0) -> None:
    if not least <= len(items) <= most:
        raise InvalidControl(f"{field}: {least} to {most} entries, got {len(items)}")


def _rate(field: str, v: Any, zero: bool = False) -> None:
    """A rate: finite, in (``MIN_RATE_QPS``, ``MAX_RATE_QPS``); or 0 where ``zero`` (none)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        and (MIN_RATE_QPS < v < MAX_RATE_QPS or (zero and v == 0))
    if not ok:
        raise InvalidControl(f"{field}: must be a finite rate in ({MIN_RATE_QPS:g}, {MAX_RATE_QPS:g})"
                             f"{' or 0' if zero else ''}, got {v!r}")


def _stage(pipe: Pipeline, name: str, field: str = "stage"):
    for s in pipe.stages:
        if s.name == name:
            return s
    raise InvalidControl(f"{field}: unknown stage {name!r} (pipeline {pipe.name} has "
                         f"{[s.name for s in pipe.stages]})")


def _integer(rec: Mapping[str, Any], field: str, lo: int, hi: int, prefix: str = "") -> None:
    v = rec[field]
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise InvalidControl(f"{prefix}{field}: must be an integer in [{lo}, {hi}], got {v!r}")


def _number(rec: Mapping[str, Any], field: str, lo: float, hi: float) -> None:
    _finite(field, rec[field], lo, hi)


def _finite(field: str, v: Any, lo: float, hi: float, low_open: bool = False) -> None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        and (lo < v if low_open else lo <= v) and v <= hi
    if not ok:
        bounds = f"{'(' if low_open else '['}{lo:g}, {hi:g}]"
        raise InvalidControl(f"{field}: must be a finite number in {bounds}, got {v!r}")


def next_epoch(*seen: int) -> int:
    """The ``epoch`` field a writer (planner, tuner, CLI) puts on its next control record: one past the
    highest epoch it has read or written. Read epochs are offsets, so this is a lower bound of the
    offset the record will get; clamped to ``EPOCH_MAX``, so it never overflows whatever was read."""
    return min(max((int(s) for s in seen), default=-1) + 1, EPOCH_MAX)


def current_records(history: Iterable[tuple[int, Mapping[str, Any]]]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """A control history's ``(timestamp ns, record)`` pairs in time order, less each StageConfig whose
    epoch is below the newest its stage had by then (the compacted topic's rule: a stale record read
    late changes nothing). A record without an epoch (a ScalingAction) passes."""
    newest: dict[str, int] = {}
    for at_ns, rec in sorted(history, key=lambda r: r[0]):
        if "epoch" in rec:
            if rec["epoch"] < newest.get(rec.get("stage"), -1):
                continue
            newest[rec.get("stage")] = rec["epoch"]
        yield at_ns, rec
