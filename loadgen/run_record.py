"""A run's report folder, the one reader and writer of its files.

- ``results.jsonl``: every result record the run read back (``InferenceResult.to_dict`` with the
  payload bytes, ``output``, left out), one JSON object a line, read back as records;
  ``slipstream loadgen report`` summarises one, ``calibrate`` and ``estimate`` replay them;
- ``control.jsonl``: what the run saw on the control topic (StageConfigs, ScalingActions), each with
  its Kafka timestamp, ``{"at_ns": ..., "record": {...}}`` a line; a report older than this file has
  none (the estimator then replays replica changes only);
- ``plan.json``: the plan the run started from (``Plan.to_dict``);
- ``summary.json`` (with ``summary.txt`` and the plots): ``slipstream.loadgen.render.write_report``.

Which StageConfigs were in force is read with the control topic's one epoch rule
(``slipstream.planner.calibrate.configs_in_force``, on ``slipstream.streams.control_rules.current_records``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..schemas.records import InferenceResult

RESULTS, CONTROL, PLAN, SUMMARY = "results.jsonl", "control.jsonl", "plan.json", "summary.json"


def read_results(path: str | Path) -> list[InferenceResult]:
    """The result records of a ``results.jsonl`` (blank lines skipped; ``output`` empty; a gateway
    run's line from before results were records has no ``pipeline``: "")."""
    return [InferenceResult.from_dict({"pipeline": "", **json.loads(line)})
            for line in Path(path).read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class RunRecord:
    folder: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", Path(self.folder))

    def write_results(self, results: Iterable[InferenceResult]) -> Path:
        path = self.folder / RESULTS
        with path.open("w") as fh:
            for r in results:
                d = r.to_dict()
                del d["output"]
                fh.write(json.dumps(d) + "\n")
        return path

    def results(self) -> list[InferenceResult]:
        return read_results(self.folder / RESULTS)

    def has_results(self) -> bool:
        return (self.folder / RESULTS).exists()

    def start_ns(self) -> int:
        """When the run's first request was created (0 without results)."""
        return min((r.created_ns for r in self.results()), default=0)

    def write_control(self, records: Iterable[tuple[int, Mapping[str, Any]]]) -> Path:
        path = self.folder / CONTROL
        with path.open("w") as fh:
            for at_ns, rec in records:
                fh.write(json.dumps({"at_ns": int(at_ns), "record": rec}) + "\n")
        return path

    def control(self) -> list[tuple[int, dict]]:
        """(Kafka timestamp ns, record) of every control record the run saw; [] when none was kept."""
        path = self.folder / CONTROL
        if not path.exists():
            return []
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [(d["at_ns"], d["record"]) for d in lines]

    def configs_in_force(self) -> list[tuple[int, Mapping[str, Any]]]:
        """The StageConfigs in force at some time of the run (from its first request on)."""
        from ..planner.calibrate import configs_in_force

        return configs_in_force(self.control(), self.start_ns())

    def write_plan(self, plan) -> Path:
        path = self.folder / PLAN
        path.write_text(json.dumps(plan.to_dict(), indent=1) + "\n")
        return path

    def plan_doc(self) -> dict | None:
        """The plan as written (a dict), or None when the run kept none."""
        path = self.folder / PLAN
        return json.loads(path.read_text()) if path.exists() else None

    def plan(self):
        from ..planner.plan import Plan

        return Plan.from_dict(json.loads((self.folder / PLAN).read_text()))

    def summary(self):
        from .render import read_summary

        return read_summary(self.folder / SUMMARY)
