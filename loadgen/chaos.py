"""The fault suite's arithmetic (pure): which faults to inject, what a case's results say, the table.

A case is one open-loop replay with at most one fault, injected ``fault_at_s`` into it
(``slipstream chaos`` runs them: ``loadgen/faults/chaos_run.py``). What a case reports, from every result
record of the replay read back from the results topic (duplicates included) and the send times:

- requests, missing, duplicates (records beyond a request's first) and conflicting (requests whose
  results disagree on status): :func:`slipstream.loadgen.collect.check_exactly_once`;
- attainment (done within the SLO, of every request sent) and its worst window after the fault;
- recovery time (:func:`recovery_time_s`): from the fault until the results have caught up with
  the offered load again, and stay caught up.

Backlog at time t = requests sent by t that have no result by t (a result counts at its record's
timestamp on the results topic). Before the fault it hovers around rate x latency; a fault that
stops results makes it grow, and it falls back once results flow faster than requests arrive.
"Caught up" = the backlog is at most its pre-fault maximum plus a slack (half that maximum, at least
2 requests); the recovery time is the first instant after the fault from which the backlog stays
caught up until the end of the replay, minus the fault time (0 if the fault never pushed it above).
From that instant on results flow at the offered rate with the pre-fault latency; a rate that
comes back while an old backlog still waits does not count as recovered.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..schemas.records import InferenceResult
from .collect import check_exactly_once

NS_PER_S = 1_000_000_000
NONE, KILL, FREEZE, BROKER, NODE = "none", "kill", "freeze", "broker", "node"
SERVICES = ("tuner", "planner")  # control-plane processes the local supervisor runs beside the workers


@dataclass(frozen=True)
class FaultCase:
    name: str
    action: str  # NONE, KILL (SIGKILL a role's process group), FREEZE (SIGSTOP, then SIGCONT), BROKER, NODE
    target: str = ""  # the role: a stage, "join", "tuner" or "planner"
    hold_s: float = 0.0  # FREEZE: how long stopped; BROKER/NODE: how long down before the restart

    def __post_init__(self) -> None:
        if self.action not in (NONE, KILL, FREEZE, BROKER, NODE):
            raise ValueError(f"unknown fault action {self.action!r}")
        if self.action in (KILL, FREEZE) and not self.target:
            raise ValueError(f"{self.name}: {self.action} needs a target role")


def fault_cases(stages: Sequence[str], *, has_join: bool, brokers: int, freeze_stage: str, freeze_s: float,
                broker_down_s: float, services: Sequence[str] = SERVICES) -> tuple[FaultCase, ...]:
    """The suite: a baseline, kill -9 of every stage worker, the join, each control-plane service,
    one SIGSTOP past the session timeout, and the broker (one of three when ``brokers`` >= 3)."""
    if freeze_stage not in stages:
        raise ValueError(f"freeze stage {freeze_stage!r} is not one of {list(stages)}")
    out = [FaultCase("baseline (no fault)", NONE)]
    out += [FaultCase(f"kill -9 {s} worker", KILL, s) for s in stages]
    out += [FaultCase("kill -9 join worker", KILL, "join")] if has_join else []
    out += [FaultCase(f"kill -9 {s}", KILL, s) for s in services]
    out += [FaultCase(f"SIGSTOP {freeze_stage} worker {freeze_s:g} s", FREEZE, freeze_stage, freeze_s)]
    if brokers >= 3:
        out += [FaultCase(f"kill -9 1 broker of {brokers}, back after {broker_down_s:g} s", NODE, "", broker_down_s)]
    else:
        out += [FaultCase(f"kill -9 the broker, back after {broker_down_s:g} s", BROKER, "", broker_down_s)]
    return tuple(out)


def select(cases: Sequence[FaultCase], names: Iterable[str]) -> tuple[FaultCase, ...]:
    """Cases whose name contains any of ``names`` (all when ``names`` is empty)."""
    names = [n for n in names if n]
    return tuple(c for c in cases if not names or any(n in c.name for n in names))


def backlog(sent_ns: np.ndarray, answered_ns: np.ndarray, at_ns: np.ndarray) -> np.ndarray:
    """Requests sent by each instant of ``at_ns`` without a result by then (unanswered: +inf)."""
    s, a = np.sort(np.asarray(sent_ns)), np.sort(np.asarray(answered_ns, dtype=float))
    at = np.asarray(at_ns)
    return np.searchsorted(s, at, side="right") - np.searchsorted(a, at, side="right")


@dataclass(frozen=True)
class Recovery:
    seconds: float | None  # None: the backlog never came back down (requests still missing)
    baseline: int  # pre-fault maximum backlog
    threshold: float
    after_last_send: bool  # caught up only once nothing more was offered

    def __str__(self) -> str:
        if self.seconds is None:
            return "not recovered"
        return f"{self.seconds:.1f} s" + (" (after the last send)" if self.after_last_send else "")


def recovery_time_s(sent_ns: np.ndarray, answered_ns: np.ndarray, fault_ns: int, *,
                    pre_s: float = 8.0) -> Recovery:
    """See the module docstring. ``answered_ns[i]`` is when request ``sent_ns[i]`` got its first
    result (+inf if never)."""
    sent = np.asarray(sent_ns, dtype=np.int64)
    answered = np.asarray(answered_ns, dtype=float)
    events = np.unique(np.concatenate([sent, answered[np.isfinite(answered)].astype(np.int64)]))
    pre = events[(events >= fault_ns - pre_s * NS_PER_S) & (events < fault_ns)]
    base = int(backlog(sent, answered, pre).max()) if len(pre) else 0
    threshold = base + max(2.0, 0.5 * base)
    post = events[events >= fault_ns]
    if not len(post):
        return Recovery(0.0, base, threshold, False)
    level = backlog(sent, answered, post)
    above = np.flatnonzero(level > threshold)
    if not len(above):
        return Recovery(0.0, base, threshold, False)
    k = above[-1] + 1
    if k >= len(post):
        return Recovery(None, base, threshold, False)
    at = int(post[k])
    return Recovery((at - fault_ns) / NS_PER_S, base, threshold, at > int(sent.max()))


def window_attainment(created_ns: np.ndarray, ok: np.ndarray, start_ns: int, end_ns: int,
                      window_s: float = 2.0, min_requests: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(window start in s after ``start_ns``, share of requests created in it that met the SLO) for
    the windows holding at least ``min_requests`` requests."""
    created, ok = np.asarray(created_ns), np.asarray(ok, dtype=bool)
    edges = np.arange(start_ns, end_ns + 1, int(window_s * NS_PER_S))
    if len(edges) < 2:
        return np.array([]), np.array([])
    idx = np.digitize(created, edges) - 1
    t, att = [], []
    for w in range(len(edges) - 1):
        mine = idx == w
        if mine.sum() >= min_requests:
            t.append((edges[w] - start_ns) / NS_PER_S)
            att.append(ok[mine].mean())
    return np.array(t), np.array(att)


@dataclass(frozen=True)
class CaseOutcome:
    case: FaultCase
    requests: int
    missing: int
    duplicates: int
    conflicting: int
    recovery: Recovery
    attainment: float  # done within the SLO, of every request sent
    worst_attainment: float  # the lowest 2-s window (by send time) from the fault on
    note: str = ""

    def row(self) -> dict[str, Any]:
        return {"case": self.case.name, "requests": self.requests, "missing": self.missing,
                "duplicates": self.duplicates, "conflicting": self.conflicting,
                "recovery_s": self.recovery.seconds, "recovery": str(self.recovery),
                "attainment": self.attainment, "worst_2s_attainment": self.worst_attainment, "note": self.note}


Timed = tuple[int, InferenceResult]  # (the record's timestamp on the results topic in ns, the result)


def outcome(case: FaultCase, records: Sequence[Timed], sent: Mapping[str, int], fault_ns: int | None,
            slo_ms: float, note: str = "") -> CaseOutcome:
    """A case's outcome from every result record read back (with its timestamp) and ``sent``
    (request id -> send time, ns). Without a fault, the recovery is 0."""
    delivery = check_exactly_once((r for _, r in records), sent)
    first: dict[str, Timed] = {}
    for ts, r in sorted(records, key=lambda x: x[0]):
        first.setdefault(r.request_id, (ts, r))
    ids = sorted(sent, key=sent.get)
    sent_ns = np.array([sent[i] for i in ids], dtype=np.int64)
    answered = np.array([first[i][0] if i in first else math.inf for i in ids], dtype=float)
    ok = np.array([i in first and first[i][1].status == "done"
                   and first[i][1].finished_ns - first[i][1].created_ns <= slo_ms * 1e6 for i in ids], dtype=bool)
    at = fault_ns if fault_ns is not None else (int(sent_ns.min()) if len(sent_ns) else 0)
    rec = recovery_time_s(sent_ns, answered, fault_ns) if fault_ns is not None else Recovery(0.0, 0, 0.0, False)
    _, win = window_attainment(sent_ns, ok, at, int(sent_ns.max()) if len(sent_ns) else at)
    return CaseOutcome(case, len(sent), len(delivery.missing), len(delivery.duplicates), len(delivery.conflicting),
                       rec, float(ok.mean()) if len(ok) else float("nan"),
                       float(win.min()) if len(win) else float("nan"), note)


def case_row(ts_ns: int, r: InferenceResult) -> dict[str, Any]:
    """A timed result as a case file (``cases/*.json``) keeps it: :func:`plot_backlogs` reads it back."""
    return {"request_id": r.request_id, "status": r.status, "created_ns": r.created_ns,
            "finished_ns": r.finished_ns, "reason": r.reason, "ts_ns": ts_ns}


HEADER = ("fault", "requests", "missing", "duplicates", "conflicting", "recovery", "attainment", "worst 2 s")


def table_rows(outcomes: Sequence[CaseOutcome]) -> list[tuple[str, ...]]:
    def pct(x: float) -> str:
        return "n/a" if math.isnan(x) else f"{100 * x:.1f} %"

    return [(o.case.name, str(o.requests), str(o.missing), str(o.duplicates), str(o.conflicting),
             str(o.recovery), pct(o.attainment), pct(o.worst_attainment)) for o in outcomes]


def format_table(outcomes: Sequence[CaseOutcome]) -> str:
    """A Markdown table (one row per case)."""
    rows = table_rows(outcomes)
    out = ["| " + " | ".join(HEADER) + " |", "|---|" + "---:|" * (len(HEADER) - 1)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def plot_table(outcomes: Sequence[CaseOutcome], path, title: str):
    """The table as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table_rows(outcomes)
    fig, ax = plt.subplots(figsize=(12, 0.45 * (len(rows) + 2) + 0.6))
    ax.axis("off")
    tab = ax.table(cellText=rows, colLabels=HEADER, loc="center", cellLoc="right", colLoc="right")
    tab.auto_set_font_size(False)
    tab.set_fontsize(9)
    tab.auto_set_column_width(list(range(len(HEADER))))
    for (r, c), cell in tab.get_celld().items():
        if c == 0:
            cell.set_text_props(ha="left")
        bad = r > 0 and c in (2, 3, 4) and rows[r - 1][c] != "0"
        if bad:
            cell.set_facecolor("#f8d7da")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_backlogs(cases: Sequence[Mapping[str, Any]], path):
    """One panel per case: the backlog over time (s from the first send), the fault and the recovery.
    Each case is a case file's dict with ``name``, ``sent`` (request id -> send ns), ``results``
    (:func:`case_row` dicts, with ``ts_ns``) and ``fault_ns`` (or None)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(cases), 1)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 2.2 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax, c in zip(axes.flat, cases):
        sent = np.array(sorted(c["sent"].values()), dtype=np.int64)
        if not len(sent):
            continue
        first: dict[str, int] = {}
        for r in sorted(c["results"], key=lambda r: r["ts_ns"]):
            first.setdefault(r["request_id"], r["ts_ns"])
        answered = np.array([first.get(i, math.inf) for i in c["sent"]], dtype=float)
        t0 = int(sent.min())
        events = np.unique(np.concatenate([sent, answered[np.isfinite(answered)].astype(np.int64)]))
        ax.step((events - t0) / NS_PER_S, backlog(sent, answered, events), where="post", lw=0.8)
        if c.get("fault_ns"):
            f = c["fault_ns"]
            ax.axvline((f - t0) / NS_PER_S, color="tab:red", lw=1, label="fault")
            rec = recovery_time_s(np.array(list(c["sent"].values())), answered, f)
            ax.axhline(rec.threshold, color="tab:gray", ls=":", lw=1)
            if rec.seconds is not None and rec.seconds > 0:
                ax.axvline((f - t0) / NS_PER_S + rec.seconds, color="tab:green", lw=1, ls="--",
                           label=f"caught up +{rec.seconds:.1f} s")
            ax.legend(fontsize="x-small", loc="upper right")
        ax.set_title(c["name"], fontsize=9)
        ax.set_ylabel("backlog", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("s from the first send", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
