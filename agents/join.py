"""The join: fan-out fragments of one request summed back into one ``InferenceResult``.

Each fragment carries its share of the request (``fragment``, a fraction) and its fan-out ``path``.
A request is complete when the shares of its distinct paths add up to 1; duplicates (at-least-once
redelivery) are recognised by path and ignored. A request still incomplete ``timeout`` after its
deadline is closed as ``dropped`` with a reason naming the share that is missing.

Combined status: ``error`` if any part erred, else ``dropped`` if any part was dropped, else ``done``.
The output is JSON: ``{"parts": [{"path": [...], "content_type": ..., "output": ...}]}`` (text
outputs as strings, other bytes base64). The join appends its own hop, so hops still add up.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping

STATUS_ORDER = {"done": 0, "dropped": 1, "error": 2}


@dataclass
class _Pending:
    parts: dict[tuple, Mapping[str, Any]] = field(default_factory=dict)
    total: Fraction = Fraction(0)


@dataclass
class Joiner:
    timeout_ns: int
    worker: str = "join"
    _pending: dict[str, _Pending] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, frag: Mapping[str, Any], now_ns: int) -> dict | None:
        """Add one fragment; returns the joined result when its request is complete."""
        rid = frag["request_id"]
        p = self._pending.setdefault(rid, _Pending())
        key = tuple(frag.get("path", []))
        if key in p.parts:
            return None
        p.parts[key] = frag
        p.total += Fraction(frag.get("fragment", "1"))
        if p.total > 1:
            raise ValueError(f"request {rid}: fragments add up to {p.total} > 1 (paths {sorted(p.parts)})")
        if p.total == 1:
            del self._pending[rid]
            return combine(list(p.parts.values()), now_ns, self.worker)
        return None

    def expire(self, now_ns: int) -> list[dict]:
        """Close the requests whose deadline passed more than ``timeout_ns`` ago."""
        out = []
        for rid in [r for r, p in self._pending.items()
                    if now_ns > next(iter(p.parts.values()))["deadline_ns"] + self.timeout_ns]:
            p = self._pending.pop(rid)
            missing = 1 - p.total
            res = combine(list(p.parts.values()), now_ns, self.worker)
            res["status"] = "dropped" if res["status"] == "done" else res["status"]
            have = ", ".join("/".join(k) or "(root)" for k in sorted(p.parts))
            res["reason"] = "; ".join(x for x in (
                f"join timeout: {missing} of the request never arrived (have {len(p.parts)} "
                f"fragment(s): {have})", res["reason"]) if x)
            out.append(res)
        return out


def _text(b: bytes) -> str | dict:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode()}


def combine(parts: list[Mapping[str, Any]], now_ns: int, worker: str) -> dict:
    first = parts[0]
    status = max((p["status"] for p in parts), key=STATUS_ORDER.__getitem__)
    reasons = sorted({p["reason"] for p in parts if p["status"] != "done" and p["reason"]})
    seen, hops = set(), []
    for p in parts:
        for h in p.get("hops", []):
            k = (h["stage"], h["worker"], h["started_ns"], h["finished_ns"])
            if k not in seen:
                seen.add(k)
                hops.append(h)
    hops.sort(key=lambda h: (h["finished_ns"], h["stage"]))
    last = max(p["finished_ns"] for p in parts)
    hops.append({"stage": "join", "variant": "join", "batch_size": len(parts), "enqueued_ns": last,
                 "started_ns": now_ns, "finished_ns": now_ns, "worker": worker})
    done = [p for p in parts if p["status"] == "done" and p.get("output")]
    output = json.dumps({"parts": [{"path": list(p.get("path", [])), "content_type": p["content_type"],
                                    "output": _text(p["output"])} for p in done]}).encode()
    return {
        "request_id": first["request_id"], "pipeline": first["pipeline"], "status": status,
        "reason": "; ".join(reasons), "created_ns": first["created_ns"],
        "deadline_ns": first["deadline_ns"], "finished_ns": now_ns, "content_type": "application/json",
        "output": output, "hops": hops,
        "accuracy": sum(p.get("accuracy", 1.0) for p in parts) / len(parts), "parts": len(parts),
        "fragment": "1", "path": [],
    }
