"""The profile store: one versioned JSON file per (variant, hardware), read by the planner (to plan)
and by the stage workers (to seed their latency predictors with the same numbers).

Layout: ``<dir>/<variant>@<hardware>.json``::

    {"format": 1, "variant": "lite0", "hardware": "cpu-4", "accuracy": 0.753 | null,
     "machine": {"hostname": ..., "platform": ..., "processor": ..., "cpus": ...},
     "measured_at": "2026-01-01T00:00:00Z", "source": "measured" | "imported:<csv path>",
     "percentile": "p99",                 # which column the curve fits (p90 for imported tables)
     "points": {"1": {"p50_ms": 4.1, "p99_ms": 5.0, "reps": 200}, ...}}

``Profile.curve()`` fits ``slipstream.streams.latency.LatencyCurve`` to the ``percentile`` column (IPA:
quadratic, linear fallback), times the service ``scale`` of the calibration in force
(``slipstream.streams.calibration``: what a live run measured against the profile; 1 without one).
:func:`lookup` finds a variant's profile by its name, then by its model.
"""
from __future__ import annotations

import os
import platform
import re
import socket
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from .calibration import CalibrationStore, batch_scale, key, service_scale
from .jsonfile import read_versioned, write_atomic
from .latency import LatencyCurve
from .spec import Variant

FORMAT_VERSION = 1


class ProfileError(ValueError):
    """A profile file or table that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class BatchPoint:
    p50_ms: float
    p99_ms: float
    reps: int = 0
    p90_ms: float | None = None


@dataclass(frozen=True)
class Profile:
    variant: str
    hardware: str
    points: Mapping[int, BatchPoint]
    machine: Mapping[str, object] = field(default_factory=dict)
    measured_at: str = ""
    source: str = "measured"
    percentile: str = "p99"
    accuracy: float | None = None
    scale: float = 1.0  # the calibration's service scale (not stored in the profile file)
    by_batch: Mapping[str, float] | None = None  # the same per batch size, where the calibration measured it

    def curve(self) -> LatencyCurve:
        key = f"{self.percentile}_ms"
        pts = {b: getattr(p, key) if getattr(p, key) is not None else p.p99_ms for b, p in self.points.items()}
        return LatencyCurve.fit({b: v * (batch_scale(self.by_batch, b) if self.by_batch else self.scale)
                                 for b, v in pts.items()})

    def to_json(self) -> dict:
        return {"format": FORMAT_VERSION, "variant": self.variant, "hardware": self.hardware,
                "accuracy": self.accuracy, "machine": dict(self.machine), "measured_at": self.measured_at,
                "source": self.source, "percentile": self.percentile,
                "points": {str(b): {k: v for k, v in p.__dict__.items() if v is not None}
                           for b, p in sorted(self.points.items())}}


def machine_info() -> dict[str, object]:
    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()}


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


class ProfileStore:
    """A directory of profile files. Reads validate the format version; writes are atomic.

    ``calibration``: ``off``, ``latest`` or a version (default: ``$SLIPSTREAM_CALIBRATION``, else the
    newest), read once here; :func:`lookup` returns profiles scaled by it."""

    def __init__(self, root: str | Path, calibration: str | None = None) -> None:
        self.root = Path(root)
        self.calibrations = CalibrationStore(self.root)
        self.calibration = self.calibrations.in_force(calibration)

    def path(self, variant: str, hardware: str) -> Path:
        return self.root / f"{variant}@{hardware}.json"

    def save(self, profile: Profile) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        p = self.path(profile.variant, profile.hardware)
        return write_atomic(p, profile.to_json())

    def load_file(self, p: Path) -> Profile:
        doc = read_versioned(p, FORMAT_VERSION, ProfileError, "profile")
        try:
            points = {int(b): BatchPoint(**v) for b, v in doc["points"].items()}
            return Profile(doc["variant"], doc["hardware"], points, doc.get("machine", {}),
                           doc.get("measured_at", ""), doc.get("source", ""), doc.get("percentile", "p99"),
                           doc.get("accuracy"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(f"{p}: points: {exc}") from None

    def get(self, variant: str, hardware: str) -> Profile | None:
        """The profile file as measured (not scaled: :func:`lookup` applies the calibration)."""
        p = self.path(variant, hardware)
        return self.load_file(p) if p.exists() else None

    def all(self) -> list[Profile]:
        return [self.load_file(p) for p in sorted(self.root.glob("*@*.json"))]


def lookup(store: ProfileStore, variant: Variant, hardware: str) -> Profile | None:
    """A variant's profile on ``hardware`` (by its name, else by its model's name), scaled by the
    store's calibration for this variant (calibrations key by the pipeline's variant names; a
    variant it did not measure gets the machine's scale, ``slipstream.streams.calibration.unmeasured_scale``)."""
    prof = store.get(variant.name, hardware) or store.get(slug(variant.model), hardware)
    if prof is None or not store.calibration:
        return prof
    entry = store.calibration.get("service", {}).get(key(variant.name, hardware)) or {}
    return replace(prof, scale=service_scale(store.calibration, variant.name, hardware), by_batch=entry.get("by_batch"))
