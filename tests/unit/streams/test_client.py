"""The client's result bookkeeping, without a broker: only its own requests' results are kept, the
first one wins, and a stopped reader fails every waiter at once instead of leaving it to time out."""
import asyncio
from pathlib import Path

import pytest

from slipstream.streams.client import PipelineClient
from slipstream.streams.config import KafkaSettings
from slipstream.streams.spec import load_pipeline

PIPE = Path(__file__).resolve().parents[3] / "deploy" / "pipelines" / "image-classify.yaml"


def result(rid: str, status: str = "done") -> dict:
    return {"request_id": rid, "status": status}


async def test_keeps_only_its_own_requests_results_and_counts_duplicates():
    c = PipelineClient(load_pipeline(PIPE), KafkaSettings())
    mine = c.expect("mine")
    c.offer(result("someone-elses"))
    c.offer(result("mine"))
    c.offer(result("mine", "dropped"))
    assert (await mine)["status"] == "done"
    assert c.results == {"mine": result("mine")} and c.duplicates == 1
    assert await c.result("mine") == result("mine")


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
