"""A model run has a deadline (``slipstream.agents.instances``): past it the run is abandoned, its instance marked
hung, and liveness fails until the thread is really done; a run in time is untouched."""
import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from slipstream.agents.instances import RUN_DEADLINE_FLOOR_S, Instance, RunPastDeadline, run_bounded, run_deadline_s
from slipstream.streams.heartbeat import Heartbeat


def test_the_deadline_scales_with_the_slo_above_a_floor():
    assert run_deadline_s(100) == RUN_DEADLINE_FLOOR_S
    assert run_deadline_s(2000) == pytest.approx(20.0)


async def test_a_hung_run_is_abandoned_at_its_deadline_and_fails_liveness_until_its_thread_ends():
    inst = Instance({}, ThreadPoolExecutor(max_workers=1))
    hb = Heartbeat()
    release = threading.Event()
    try:
        assert await run_bounded(inst, hb, 5, "quick run", lambda x: x + 1, 1) == 2
        assert inst.hung is None and hb.problem() is None
        with pytest.raises(RunPastDeadline, match="hung run past its deadline of 0.2 s: instance replaced"):
            await run_bounded(inst, hb, 0.2, "hung run", release.wait, 30)
        assert inst.hung is not None
        assert hb.problem().startswith("hung run: ")  # the thread still holds the copy
        release.set()
        await asyncio.wait_for(asyncio.to_thread(inst.pool.shutdown, True), 10)
        assert hb.problem() is None  # the thread came back: nothing is hung any more
    finally:
        release.set()
        inst.pool.shutdown(wait=False)
