"""One arrivals reader for the tuner and the planner in one process (``slipstream.streams.shared_arrivals``):
each reader sees what a reader of its own would, and the source is started and stopped once."""
import asyncio

import numpy as np
import pytest

from slipstream.streams.shared_arrivals import SharedArrivals


class FakeSource:
    """KafkaArrivals' interface: control records to its callbacks, then chunks, on cue."""

    made: list["FakeSource"] = []

    def __init__(self, settings, pipeline, source_stage, *, on_stage_config, on_handoff, on_invalid, spec,
                 **kwargs) -> None:
        self.on_stage_config, self.on_handoff, self.on_invalid = on_stage_config, on_handoff, on_invalid
        self.kwargs = kwargs
        self.feed: asyncio.Queue = asyncio.Queue()
        self.starts = self.stops = 0
        FakeSource.made.append(self)

    async def start(self) -> None:
        self.starts += 1

    async def stop(self) -> None:
        self.stops += 1

    def __aiter__(self):
        return self._chunks()

    async def _chunks(self):
        while True:
            kind, x = await self.feed.get()
            if kind == "chunk":
                yield np.asarray(x, dtype=np.int64)
            elif kind == "config":
                self.on_stage_config(x)
            elif kind == "handoff":
                self.on_handoff(x)
            elif kind == "fail":
                raise x
            else:
                self.on_invalid()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def take(reader, n: int) -> list[list[int]]:
    it = reader.__aiter__()
    return [list(await asyncio.wait_for(it.__anext__(), 1.0)) for _ in range(n)]


async def test_every_reader_gets_every_chunk_and_control_record_from_one_source():
    shared = SharedArrivals(None, "p", "s", source=FakeSource, lookback_s=0.0)
    src = FakeSource.made[-1]
    seen = {"tuner": [], "planner": []}
    tuner = shared.reader(None, "p", "s", on_stage_config=seen["tuner"].append,
                          on_handoff=lambda h: seen["tuner"].append(("handoff", h)),
                          on_invalid=lambda: seen["tuner"].append("invalid"), lookback_s=0.0, spec=None)
    planner = shared.reader(None, "p", "s", on_stage_config=seen["planner"].append, lookback_s=0.0, spec=None)
    await tuner.start()
    await planner.start()
    for item in [("chunk", [1, 2]), ("config", "c1"), ("handoff", "h1"), ("invalid", None), ("chunk", [3])]:
        src.feed.put_nowait(item)
    assert await take(tuner, 2) == [[1, 2], [3]]
    assert await take(planner, 2) == [[1, 2], [3]]
    assert seen == {"tuner": ["c1", ("handoff", "h1"), "invalid"], "planner": ["c1"]}  # no handoff callback: none
    assert src.starts == 1
    await tuner.stop()
    assert src.stops == 0  # the planner still reads
    await planner.stop()
    assert src.stops == 1


async def test_a_reader_that_starts_later_first_gets_the_records_and_the_history_before_it():
    shared = SharedArrivals(None, "p", "s", source=FakeSource)
    src = FakeSource.made[-1]
    first_seen, late_seen = [], []
    first = shared.reader(None, "p", "s", on_stage_config=first_seen.append)
    await first.start()
    src.feed.put_nowait(("chunk", [10]))  # the source's first chunk: its lookback
    src.feed.put_nowait(("config", "c1"))
    src.feed.put_nowait(("chunk", [11]))
    assert await take(first, 2) == [[10], [11]]
    late = shared.reader(None, "p", "s", on_stage_config=late_seen.append)
    await late.start()
    assert late_seen == ["c1"]  # as a reader of its own, from the control topic's start, would have
    src.feed.put_nowait(("chunk", [12]))
    assert await take(late, 2) == [[10], [12]]
    assert await take(first, 1) == [[12]]
    await settle()
    assert src.starts == 1
    await first.stop()
    await late.stop()


async def test_a_reader_of_another_pipeline_is_refused():
    shared = SharedArrivals(None, "p", "s", source=FakeSource)
    with pytest.raises(ValueError, match="other/s"):
        shared.reader(None, "other", "s", on_stage_config=print)


async def test_when_the_source_fails_every_reader_raises_its_exception():
    shared = SharedArrivals(None, "p", "s", source=FakeSource)
    src = FakeSource.made[-1]
    readers = [shared.reader(None, "p", "s", on_stage_config=print) for _ in range(2)]
    for r in readers:
        await r.start()
    src.feed.put_nowait(("chunk", [1]))
    src.feed.put_nowait(("fail", ConnectionError("broker away")))
    for r in readers:
        it = r.__aiter__()
        assert list(await it.__anext__()) == [1]
        with pytest.raises(ConnectionError, match="broker away"):
            await asyncio.wait_for(it.__anext__(), 1.0)
    for r in readers:
        await r.stop()
