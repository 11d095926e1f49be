"""A model run has a deadline (``slipstream.agents.replicas``): past it the run is abandoned, its replica marked
hung, and liveness fails until the thread is really done; a run in time is untouched."""
import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from slipstream.agents.replicas import RUN_DEADLINE_FLOOR_S, Replica, RunPastDeadline, run_bounded, run_deadline_s
from slipstream.streams.heartbeat import Heartbeat


def test_the_deadline_scales_with_the_slo_above_a_floor():
    assert run_deadline_s(100) == RUN_DEADLINE_FLOOR_S
    assert run_deadline_s(2000) == pytest.approx(20.0)


async def test_a_hung_run_is_abandoned_at_its_deadline_and_fails_liveness_until_its_thread_ends():
    replica = Replica({}, ThreadPoolExecutor(max_workers=1))
    hb = Heartbeat()
    release = threading.Event()
    try:
        assert await run_bounded(replica, hb, 5, "quick run", lambda x: x + 1, 1) == 2
        assert replica.hung is None and hb.problem() is None
        with pytest.raises(RunPastDeadline, match="hung run past its deadline of 0.2 s: replica replaced"):
            await run_bounded(replica, hb, 0.2, "hung run", release.wait, 30)
        assert replica.hung is not None
        assert hb.problem().startswith("hung run: ")  # the thread still holds the replica
        release.set()
        await asyncio.wait_for(asyncio.to_thread(replica.pool.shutdown, True), 10)
        assert hb.problem() is None  # the thread came back: nothing is hung any more
    finally:
        release.set()
        replica.pool.shutdown(wait=False)
