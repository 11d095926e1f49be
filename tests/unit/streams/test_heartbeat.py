"""Liveness (``slipstream.streams.heartbeat``): a stalled event loop, a wait past its deadline and a failure
each make the process not live, with the reason; a wait that ends in time does not."""
from slipstream.streams.heartbeat import Heartbeat


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_loop_that_stops_ticking_is_reported_after_the_stall_limit_and_not_before_its_first_tick():
    clock = Clock()
    hb = Heartbeat(loop_stall_s=15, clock=clock)
    clock.t += 60
    assert hb.problem() is None  # not started yet: loading a model is not a hang
    hb.tick()
    clock.t += 14
    assert hb.problem() is None
    clock.t += 2
    assert "event loop stalled: no tick for 16.0 s" in hb.problem()
    hb.tick()
    assert hb.problem() is None


def test_a_wait_past_its_deadline_is_reported_until_it_ends():
    clock = Clock()
    hb = Heartbeat(clock=clock)
    hb.tick()
    quick, slow = hb.begin("model run a", 5), hb.begin("model run b", 10)
    clock.t += 4
    hb.tick()
    hb.end(quick)
    assert hb.problem() is None
    clock.t += 7
    hb.tick()
    assert hb.problem() == "model run b: 1.0 s past its deadline"
    hb.end(slow)
    assert hb.problem() is None


def test_a_failure_stays_until_a_restart():
    hb = Heartbeat()
    hb.fail("2 input(s) neither delivered nor replaced")
    hb.fail("later")
    hb.tick()
    assert hb.problem() == "2 input(s) neither delivered nor replaced"
