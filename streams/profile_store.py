"""The profile store: one versioned JSON file per (variant, hardware), read by the planner (to plan)
and by the stage workers (to seed their latency predictors with the same numbers).

Layout: ``<dir>/<variant>@<hardware>.json``::

    {"format": 1, "variant": "lite0", "hardware": "cpu-4", "accuracy": 0.753 | null,
     "machine": {"hostname": ..., "platform": ..., "processor": ..., "cpus": ...},
     "measured_at": "2026-01-01T00:00:00Z", "source": "measured" | "imported:<csv path>",
     "percentile": "p99",                 # which column the curve fits (p90 for imported tables)
     "points": {"1": {"p50_ms": 4.1, "p99_ms": 5.0, "reps": 200}, ...}}

``Profile.curve()`` fits ``streams.latency.LatencyCurve`` to the ``percentile`` column (IPA:
quadratic, linear fallback). :func:`lookup` finds a variant's profile by its name, then by its model.
"""
from __future__ import annotations

import json
import os
import platform
import re
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from streams.latency import LatencyCurve
from streams.spec import Variant

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

    def curve(self) -> LatencyCurve:
        key = f"{self.percentile}_ms"
        pts = {b: getattr(p, key) if getattr(p, key) is not None else p.p99_ms for b, p in self.points.items()}
        return LatencyCurve.fit(pts)

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
    """A directory of profile files. Reads validate the format version; writes are atomic."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, variant: str, hardware: str) -> Path:
        return self.root / f"{variant}@{hardware}.json"

    def save(self, profile: Profile) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        p = self.path(profile.variant, profile.hardware)
        tmp = p.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(profile.to_json(), indent=1, sort_keys=True))
        tmp.replace(p)
        return p

    def load_file(self, p: Path) -> Profile:
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ProfileError(f"{p}: unreadable profile: {exc}") from None
        if doc.get("format") != FORMAT_VERSION:
            raise ProfileError(f"{p}: format: expected {FORMAT_VERSION}, got {doc.get('format')!r}")
        try:
            points = {int(b): BatchPoint(**v) for b, v in doc["points"].items()}
            return Profile(doc["variant"], doc["hardware"], points, doc.get("machine", {}),
                           doc.get("measured_at", ""), doc.get("source", ""), doc.get("percentile", "p99"),
                           doc.get("accuracy"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(f"{p}: points: {exc}") from None

    def get(self, variant: str, hardware: str) -> Profile | None:
        p = self.path(variant, hardware)
        return self.load_file(p) if p.exists() else None

    def all(self) -> list[Profile]:
        return [self.load_file(p) for p in sorted(self.root.glob("*@*.json"))]


def lookup(store: ProfileStore, variant: Variant, hardware: str) -> Profile | None:
    """A variant's profile on ``hardware``: by its name, else by its model's name."""
    return store.get(variant.name, hardware) or store.get(slug(variant.model), hardware)
