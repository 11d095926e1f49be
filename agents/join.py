"""The join: fan-out fragments of one request summed back into one ``InferenceResult``.

Each fragment carries its share of the request (``fragment``, a fraction) and its fan-out ``path``.
A request is complete when the shares of its distinct paths add up to 1; duplicates (at-least-once
redelivery) are recognised by path and ignored. A request still incomplete ``timeout`` after its
deadline is closed as ``dropped`` with a reason naming the share that is missing. Shares adding up to
more than 1 (fragments of two different fan-outs, e.g. across a variant switch) close the request as
``error``. A closed request id is remembered for ``remember_closed_ns`` (``REMEMBER_CLOSED_NS``, 15
minutes) after it closed, so a fragment of it that arrives late or again is ignored instead of opening
a second result; the join worker refills this memory from the results topic whenever it is assigned
partitions (:meth:`Joiner.remember`), so a restart does not forget (docs/guarantees.md, "The join").
The memory is bounded by count too: at most ``max_closed`` ids (``MAX_CLOSED``), the oldest forgotten
first, so its size does not grow with the request rate (15 minutes at 3,000 requests/s would be 2.7
million ids).

Combined status: ``error`` if any part erred, else ``dropped`` if any part was dropped, else ``done``.
The output is JSON: ``{"parts": [{"path": [...], "content_type": ..., "output": ...}]}`` (text
outputs as strings, other bytes base64). The join appends its own hop, so hops still add up.
Fragments come in and results go out as typed records (``slipstream.schemas.records.InferenceResult``);
a changed result is a copy (``dataclasses.replace``: records are frozen).
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, replace
from fractions import Fraction

from ..schemas.records import InferenceResult
from .routing import hop

STATUS_ORDER = {"done": 0, "dropped": 1, "error": 2}
REMEMBER_CLOSED_NS = 15 * 60 * 10**9
MAX_CLOSED = 1_000_000  # closed ids remembered at most: ~150 bytes each, ~150 MiB; 15 minutes up to ~1,100/s


@dataclass
class _Pending:
    parts: dict[tuple, InferenceResult] = field(default_factory=dict)
    total: Fraction = Fraction(0)


@dataclass
class Joiner:
    timeout_ns: int
    worker: str = "join"
    remember_closed_ns: int = REMEMBER_CLOSED_NS
    max_closed: int = MAX_CLOSED
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _closed: dict[str, int] = field(default_factory=dict)  # request id -> when it closed

    def __post_init__(self) -> None:
        if self.max_closed < 1:
            raise ValueError(f"max_closed={self.max_closed}: the join must remember at least 1 closed request")

    def __len__(self) -> int:
        return len(self._pending)

    def holds(self, request_id: str) -> bool:
        """Whether ``request_id`` is open here (its fragments are not all in yet)."""
        return request_id in self._pending

    def add(self, frag: InferenceResult, now_ns: int) -> InferenceResult | None:
        """Add one fragment; returns the joined result when its request is complete (or in error).
        Raises ValueError, changing nothing, when the fragment's share is not a fraction in (0, 1]."""
        rid = frag.request_id
        share = _share(frag)
        if rid in self._closed:
            return None
        p = self._pending.setdefault(rid, _Pending())
        key = frag.path
        if key in p.parts:
            return None
        p.parts[key] = frag
        p.total += share
        if p.total < 1:
            return None
        res = self._close(rid, now_ns)
        if p.total > 1:
            res = replace(res, status="error", reason="; ".join(x for x in (
                f"join: fragments add up to {p.total} > 1 (paths {sorted(p.parts)}): parts of different "
                f"fan-outs", res.reason) if x))
        return res

    def remember(self, closed: list[tuple[str, int]]) -> None:
        """Requests answered elsewhere or before a restart ((request id, when its result was written),
        oldest first, as read back from the results topic): closed here too. Open ones are left alone."""
        for rid, at_ns in closed:
            if rid not in self._pending:
                self._closed[rid] = max(at_ns, self._closed.get(rid, at_ns))
        self._closed = dict(sorted(self._closed.items(), key=lambda kv: kv[1]))  # closing order, for expire
        self._bound()

    def _bound(self) -> None:
        """Forget the oldest closed ids beyond ``max_closed``."""
        while len(self._closed) > self.max_closed:
            del self._closed[next(iter(self._closed))]

    def forget(self, request_ids) -> None:
        """Drop open requests without a result (their fragments' partitions moved to another join)."""
        for rid in request_ids:
            self._pending.pop(rid, None)

    def reopen(self, request_ids) -> None:
        """Forget that requests were closed: their results were not committed (exactly-once), so their
        fragments will be read again and must join again."""
        for rid in request_ids:
            self._closed.pop(rid, None)

    def _close(self, rid: str, now_ns: int) -> InferenceResult:
        p = self._pending.pop(rid)
        self._closed[rid] = now_ns
        self._bound()
        return combine(list(p.parts.values()), now_ns, self.worker)

    def expire(self, now_ns: int) -> list[InferenceResult]:
        """Close the requests whose deadline passed more than ``timeout_ns`` ago; forget closed ones
        after ``remember_closed_ns``."""
        while self._closed:  # in closing order
            rid, t = next(iter(self._closed.items()))
            if now_ns <= t + self.remember_closed_ns:
                break
            del self._closed[rid]
        out = []
        for rid in [r for r, p in self._pending.items()
                    if now_ns > next(iter(p.parts.values())).deadline_ns + self.timeout_ns]:
            p = self._pending[rid]
            missing = 1 - p.total
            res = self._close(rid, now_ns)
            have = ", ".join("/".join(k) or "(root)" for k in sorted(p.parts))
            out.append(replace(res, status="dropped" if res.status == "done" else res.status, reason="; ".join(
                x for x in (f"join timeout: {missing} of the request never arrived (have {len(p.parts)} "
                            f"fragment(s): {have})", res.reason) if x)))
        return out


def _share(frag: InferenceResult) -> Fraction:
    try:
        share = Fraction(frag.fragment)
    except (ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"request {frag.request_id}: fragment share {frag.fragment!r} is not a "
                         f"fraction: {exc}") from None
    if not 0 < share <= 1:
        raise ValueError(f"request {frag.request_id}: fragment share {share} is not in (0, 1]")
    return share


def _text(b: bytes) -> str | dict:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode()}


def combine(parts: list[InferenceResult], now_ns: int, worker: str) -> InferenceResult:
    first = parts[0]
    status = max((p.status for p in parts), key=STATUS_ORDER.__getitem__)
    reasons = sorted({p.reason for p in parts if p.status != "done" and p.reason})
    seen, hops = set(), []
    for p in parts:
        for h in p.hops:
            k = (h.stage, h.worker, h.started_ns, h.finished_ns)
            if k not in seen:
                seen.add(k)
                hops.append(h)
    hops.sort(key=lambda h: (h.finished_ns, h.stage))
    last = max(p.finished_ns for p in parts)
    hops.append(hop("join", "join", len(parts), last, now_ns, now_ns, worker, now_ns))  # as the last part is taken
    done = [p for p in parts if p.status == "done" and p.output]
    output = json.dumps({"parts": [{"path": list(p.path), "content_type": p.content_type,
                                    "output": _text(p.output)} for p in done]}).encode()
    return InferenceResult(
        request_id=first.request_id, pipeline=first.pipeline, status=status, reason="; ".join(reasons),
        created_ns=first.created_ns, deadline_ns=first.deadline_ns, finished_ns=now_ns,
        content_type="application/json", output=output, hops=tuple(hops),
        accuracy=sum(p.accuracy for p in parts) / len(parts), parts=len(parts), fragment="1", path=())
