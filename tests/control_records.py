"""Records for tests, typed (``slipstream.schemas.records``): the fields a test does not care about
filled in with plain values, the rest given as keywords (nested records as the dicts the codec decodes)."""
from typing import Any

from slipstream.schemas.records import InferenceRequest, InferenceResult, StageConfig, TunerHandoff

CAPACITY = dict(stage="s", budget_ms=100.0, rate_qps=1.0, window_qps=[1.0])
HOP = dict(stage="s", variant="a", batch_size=1, enqueued_ns=0, started_ns=0, finished_ns=0, worker="w/0")
RUNG = dict(accuracy=1.0, share=0.0, rate_qps=1.0, window_qps=[], service_ms=[])


def stage_config(**fields: Any) -> StageConfig:
    base = dict(pipeline="p", stage="s", variant="a", hardware="cpu-1", max_batch=1, batch_timeout_ms=0.0,
                replicas=1, partitions=1, epoch=0, planner_mode="test")
    return StageConfig.from_dict({**base, **fields})


def handoff(**fields: Any) -> TunerHandoff:
    base = dict(pipeline="p", epoch=0, mean_rate_qps=1.0, windows_s=[1.0], rates_qps=[1.0], stages=[])
    caps = [{**CAPACITY, **c, "ladder": [{**RUNG, **r} for r in c.get("ladder", ())]}
            for c in fields.pop("capacity", ())]
    return TunerHandoff.from_dict({**base, **fields, "capacity": caps})


def request(**fields: Any) -> InferenceRequest:
    base = dict(request_id="r", pipeline="p", created_ns=0, deadline_ns=1, content_type="x", payload=b"x")
    return InferenceRequest.from_dict({**base, **fields})


def result(**fields: Any) -> InferenceResult:
    """An InferenceResult; ``hops`` as dicts, each filled in from :data:`HOP`."""
    base = dict(request_id="r", pipeline="p", status="done", created_ns=0, deadline_ns=1, finished_ns=0)
    return InferenceResult.from_dict({**base, **fields, "hops": [{**HOP, **h} for h in fields.get("hops", ())]})
