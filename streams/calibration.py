"""Calibrations: what a live run measured that the profiles alone do not say, stored versioned next to
the profiles and read by the planner (to plan and to estimate) and the stage workers (to seed their
latency predictors), so both use the same numbers.

Layout: ``<profiles>/calibration/v<NNNN>.json``, one file per fit, never rewritten::

    {"format": 1, "version": 3, "fitted_at": "2026-11-23T14:00:00Z", "source": "reports/demo",
     "machine": {...},
     "service": {"lite0@cpu-1": {"scale": 2.4, "samples": 812,   # measured / profiled batch time
                                 "by_batch": {"1": 2.6, "4": 2.1}}},  # the same per batch size, where measured
     "service_cv": 0.35,                     # spread of a batch's time around its scaled profile
     "transit_ms": {"ingress": [q0, q1, ..., q100], "between": [...], "to_join": [...]},
     "samples": {"hops": 5230, "results": 2400}}

``transit_ms`` holds quantiles of produce -> worker receipt per kind of hop (the consumer's fetch
wait included). Which calibration is in force: the newest, unless ``SLIPSTREAM_CALIBRATION`` says
``off`` or a version number. Fitting lives in ``slipstream.planner.calibrate``; this module only stores.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Mapping

from .config import CALIBRATION_ENV, calibration_from_env
from .jsonfile import read_versioned, write_atomic

FORMAT_VERSION = 1


class CalibrationError(ValueError):
    """A calibration file that cannot be used; the message names the file and field."""


def key(variant: str, hardware: str) -> str:
    return f"{variant}@{hardware}"


class CalibrationStore:
    """The ``calibration/`` folder of a profile store."""

    def __init__(self, profiles_root: str | Path) -> None:
        self.root = Path(profiles_root) / "calibration"

    def versions(self) -> list[int]:
        out = []
        for p in self.root.glob("v*.json"):
            try:
                out.append(int(p.stem[1:]))
            except ValueError:
                continue
        return sorted(out)

    def path(self, version: int) -> Path:
        return self.root / f"v{version:04d}.json"

    def save(self, doc: Mapping[str, Any]) -> dict:
        """Store ``doc`` as the next version; returns it with ``format`` and ``version`` set."""
        self.root.mkdir(parents=True, exist_ok=True)
        version = (self.versions() or [0])[-1] + 1
        out = {**doc, "format": FORMAT_VERSION, "version": version}
        write_atomic(self.path(version), out)
        return out

    def get(self, version: int) -> dict:
        return read_versioned(self.path(version), FORMAT_VERSION, CalibrationError, "calibration")

    def in_force(self, choice: str | None = None) -> dict | None:
        """The calibration to use: ``choice`` (default ``$SLIPSTREAM_CALIBRATION``) is ``off``, a
        version number, or ``latest`` / unset (the newest, if any)."""
        choice = (calibration_from_env() if choice is None else choice).strip().lower()
        if choice == "off":
            return None
        if choice in ("", "latest"):
            versions = self.versions()
            return self.get(versions[-1]) if versions else None
        try:
            return self.get(int(choice.lstrip("v")))
        except ValueError:
            raise CalibrationError(f"{CALIBRATION_ENV}: expected off, latest or a version number, "
                                   f"got {choice!r}") from None


def service_scale(doc: Mapping[str, Any] | None, variant: str, hardware: str, batch: int | None = None) -> float:
    """How much longer than its profile a batch of ``variant`` on ``hardware`` runs (1: as profiled):
    at size ``batch``, the scale of the sizes measured (``by_batch``: a worker's per-item work, e.g.
    decoding images, weighs more in a small batch), else the one scale of all sizes; for a variant
    no run measured, the machine's (:func:`unmeasured_scale`)."""
    entry = (doc or {}).get("service", {}).get(key(variant, hardware))
    if not entry:
        return unmeasured_scale(doc, hardware)
    by = entry.get("by_batch")
    return batch_scale(by, batch) if by and batch is not None else float(entry["scale"])


def pace_sources(doc: Mapping[str, Any] | None, deployed) -> tuple[str, ...]:
    """Of ``deployed`` ((variant, hardware) pairs), each whose pace ``doc``'s own runs did not measure,
    and where its pace comes from instead: carried from an earlier calibration (its runs, on the code and
    machine of then) or the median of the measured. A prediction drawn from such a pace is trusted less
    (a refit with a run that served the variant measures it: ``slipstream calibrate``)."""
    pairs = sorted(set(deployed))
    if doc is None:
        return tuple(f"{key(v, h)} as profiled (no calibration)" for v, h in pairs)
    out = []
    for variant, hardware in pairs:
        entry = doc.get("service", {}).get(key(variant, hardware))
        if not entry:
            out.append(f"{key(variant, hardware)} never measured (x{unmeasured_scale(doc, hardware):.2f}, "
                       "the median of the measured)")
        elif "carried_from" in entry:
            out.append(f"{key(variant, hardware)} carried from {entry['carried_from']}")
    return tuple(out)


def pace_note(sources: tuple[str, ...]) -> str:
    """How estimates and comparisons print :func:`pace_sources`."""
    return f"pace drawn for variants the calibration did not measure: {'; '.join(sources)}"


def unmeasured_scale(doc: Mapping[str, Any] | None, hardware: str) -> float:
    """The scale of a variant no run measured: the median of the measured variants' scales on
    ``hardware``, else on any hardware, else 1 (no calibration). What slows every model on a machine
    (its cores, what else runs there) slows one not yet run too; at 1, a re-plan would see an
    unmeasured variant at its profile beside measured ones at x1.5-2.1 of theirs and choose it for a
    speed it does not have (e.g. planned at 26 ms a batch of 1, served at 42)."""
    scales = {k: float(v["scale"]) for k, v in ((doc or {}).get("service") or {}).items()}
    same = [s for k, s in scales.items() if k.endswith(f"@{hardware}")]
    pool = same or list(scales.values())
    return float(statistics.median(pool)) if pool else 1.0


def batch_scale(by_batch: Mapping[str, float], batch: int) -> float:
    """The scale at ``batch`` from scales measured at some sizes: interpolated in log size between
    them, the nearest one's beyond them."""
    pts = sorted((int(b), float(s)) for b, s in by_batch.items())
    x = math.log(max(batch, 1))
    for (b0, s0), (b1, s1) in zip(pts, pts[1:]):
        if x <= math.log(b1):
            t = max(0.0, (x - math.log(b0)) / (math.log(b1) - math.log(b0)))
            return s0 + t * (s1 - s0)
    return pts[-1][1]
