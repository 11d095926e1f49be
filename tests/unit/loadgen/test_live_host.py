"""The host a live run plans on (``slipstream.loadgen.live.run.colocated_host``): the calibration's, plus the
declared CPU per request."""
import pytest

from slipstream.loadgen.live.run import colocated_host
from slipstream.planner.sim.params import HostModel


def test_the_declared_cpu_per_request_goes_on_top_of_the_calibrations_host():
    fitted = HostModel(2.0, 0.65)
    assert colocated_host(fitted, 0.0, 2) is fitted
    host = colocated_host(fitted, 6.5, 2)
    assert (host.cores, host.background_cores, host.request_cpu_ms) == pytest.approx((2.0, 0.65, 6.5))


def test_without_a_calibration_the_declared_load_makes_a_host_of_this_machines_cores():
    assert colocated_host(None, 0.0, 2) is None
    assert colocated_host(None, 6.5, 2) == HostModel(2.0, request_cpu_ms=6.5)
    assert colocated_host(None, 6.5, None) is None  # a run recorded elsewhere: no host to speak of
