"""Timeline marks: one stdout line per lifecycle event of a worker, for benchmarks and supervisors.

    slipstream-worker event=<name> at_ns=<epoch ns> [key=value ...]

Events: ``process-start`` (imports done), ``model-loaded`` (first replicas loaded and warm),
``revoked`` / ``revoke-done`` (a rebalance took partitions; drained and committed), ``assigned``
(partitions given), ``producers-started`` (exactly-once: the assigned partitions' transactional
producers started, in ``ms``; a start waits while the coordinator aborts a dead owner's open
transaction), ``config-loaded`` (a StageConfig's new replicas are loaded and warm, with
``load_ms`` and ``warm_ms``) and ``config-in-force`` (applied at a window boundary).
``slipstream bench scaling`` reads them to say where a scale event's time goes.
"""
from __future__ import annotations

import re
import time

LINE = re.compile(r"slipstream-worker event=(\S+) at_ns=(\d+)((?: \S+=\S*)*)")


def mark(event: str, **fields: object) -> None:
    extra = "".join(f" {k}={v}" for k, v in fields.items())
    print(f"slipstream-worker event={event} at_ns={time.time_ns()}{extra}", flush=True)


def parse(line: str) -> tuple[str, int, dict[str, str]] | None:
    """(event, at_ns, fields) of a mark line, None for any other line."""
    m = LINE.search(line)
    if m is None:
        return None
    fields = dict(kv.split("=", 1) for kv in m.group(3).split())
    return m.group(1), int(m.group(2)), fields
