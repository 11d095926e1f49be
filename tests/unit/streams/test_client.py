"""The client's result bookkeeping, without a broker: only its own requests' results are kept, the
first one wins, and a stopped reader fails every waiter at once instead of leaving it to time out.
A request given as a mapping is sent as the record it names, or refused before anything is sent."""
import asyncio
from pathlib import Path

import pytest

from slipstream.schemas.records import InferenceRequest, InferenceResult
from slipstream.streams import client as client_mod
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.config import KafkaSettings
from slipstream.streams.spec import load_pipeline

PIPE = Path(__file__).resolve().parents[3] / "deploy" / "pipelines" / "image-classify.yaml"


def result(rid: str, status: str = "done") -> InferenceResult:
    return InferenceResult(request_id=rid, pipeline="p", status=status, created_ns=0, deadline_ns=1, finished_ns=1)


async def test_keeps_only_its_own_requests_results_and_counts_duplicates():
    c = PipelineClient(load_pipeline(PIPE), KafkaSettings())
    mine = c.expect("mine")
    c.offer(result("someone-elses"))
    c.offer(result("mine"))
    c.offer(result("mine", "dropped"))
    assert (await mine).status == "done"
    assert c.results == {"mine": result("mine")} and c.duplicates == 1
    assert await c.result("mine") == result("mine")


async def test_a_request_mapping_is_sent_as_its_record_and_a_foreign_field_sends_nothing(monkeypatch):
    c = PipelineClient(load_pipeline(PIPE), KafkaSettings())
    sent = []

    async def usable():
        return object(), 0

    async def send(prod, topic, record, value, **kw):
        sent.append((record, value, kw["key"], kw["timestamp_ns"]))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut
    monkeypatch.setattr(c._keeper, "usable", usable)
    monkeypatch.setattr(c._keeper, "watch", lambda fut, generation: None)
    monkeypatch.setattr(client_mod.kclient, "send", send)
    req = make_request(c.pipe, b"x")
    await c.send(req.to_dict())
    assert sent == [("InferenceRequest", req, req.request_id, req.created_ns)]
    assert isinstance(sent[0][1], InferenceRequest) and not c.expect(req.request_id).done()
    with pytest.raises(ValueError, match="colour"):
        await c.send({**req.to_dict(), "colour": "blue"})
    assert len(sent) == 1


async def test_a_stopped_reader_fails_waiters_at_once():
    c = PipelineClient(load_pipeline(PIPE), KafkaSettings())

    async def broken_reader():
        raise ConnectionError("broker gone")

    c._reader = asyncio.create_task(broken_reader())
    c._reader.add_done_callback(c._reader_stopped)
    waiting = c.expect("r1")
    with pytest.raises(RuntimeError, match="broker gone"):
        await asyncio.wait_for(waiting, 5)
    with pytest.raises(RuntimeError, match="reader has stopped"):
        await c.result("r2", timeout_s=5)
