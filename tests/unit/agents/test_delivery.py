"""What replaces an output that cannot be written (an error result, then a dead letter, then nothing),
and the bound on waiting for a delivery future."""
from types import SimpleNamespace

from slipstream.agents import routing
from slipstream.agents.delivery import Delivery
from slipstream.streams.spec import parse_pipeline
from tests.control_records import request

PIPE = parse_pipeline({
    "name": "p", "slo_ms": 100, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
    "stages": [{"name": "s", "variants": [{"name": "v", "model": "noop", "accuracy": 1.0}]}], "edges": []})
REQ = request(request_id="r1", pipeline="p", created_ns=1, deadline_ns=2, content_type="x", payload=b"in")
ITEM = SimpleNamespace(req=REQ, record=SimpleNamespace(value=b"raw-input", topic="t", partition=3, offset=42))


def test_replacement_chain():
    def replacement(out, item, exc):
        return routing.replacement(PIPE, "s", None, out, item, exc)

    out = routing.ended(PIPE, REQ, "done", "", 5)
    err = replacement(out, ITEM, ValueError("too large"))
    assert err.record == "InferenceResult" and err.value.status == "error"
    assert err.value.request_id == "r1" and "too large" in err.value.reason
    dl = replacement(err, ITEM, ValueError("still"))
    assert dl.record == "DeadLetter" and dl.value.original == b"raw-input"
    assert (dl.value.topic, dl.value.partition, dl.value.offset) == ("t", 3, 42)
    assert replacement(dl, ITEM, ValueError("broker refuses all")) is None
    assert replacement(dl, None, ValueError("a bad record's dead letter")) is None
    assert replacement(out, None, ValueError("nothing to answer")) is None


async def test_a_delivery_future_unanswered_past_the_retry_bound_counts_as_not_delivered():
    import asyncio
    import time

    d = Delivery(None, PIPE, "s", retry_for_s=30)
    never = asyncio.get_running_loop().create_future()  # an idempotent producer's batch towards a lost broker
    exc = await asyncio.wait_for(d._outcome(never, since=time.monotonic() - 30), 5)
    assert isinstance(exc, TimeoutError) and "within 30 s" in str(exc) and not never.done()
    done = asyncio.get_running_loop().create_future()
    done.set_result(None)
    assert await d._outcome(done, since=time.monotonic()) is None
