"""The bound on outputs awaiting delivery (``slipstream.agents.backlog``): full at either bound, free again as
deliveries end; one delivery over the byte bound is let in alone."""
from types import SimpleNamespace

import pytest

from slipstream.agents.backlog import Backlog, out_bytes


def test_full_at_the_window_bound_and_free_again_when_one_is_delivered():
    b = Backlog(max_windows=3, max_bytes=10**9)
    held = [b.add(10) for _ in range(3)]
    assert b.full() and (b.windows, b.bytes) == (3, 30)
    b.done(held.pop())
    assert not b.full()


def test_full_at_the_byte_bound_but_a_single_large_delivery_is_let_in():
    b = Backlog(max_windows=100, max_bytes=1000)
    assert not b.full()
    big = b.add(5000)
    assert b.full()  # nothing more until it is delivered
    b.done(big)
    assert not b.full() and (b.windows, b.bytes) == (0, 0)
    b.add(600)
    assert not b.full()
    b.add(600)
    assert b.full()


def test_bytes_are_the_outputs_payloads():
    outs = [SimpleNamespace(value=SimpleNamespace(payload=b"x" * 10)), SimpleNamespace(value=SimpleNamespace(output=b"y" * 5)),
            SimpleNamespace(value=SimpleNamespace(original=b"z" * 3, error="e")),
            SimpleNamespace(value=SimpleNamespace(status="dropped"))]
    assert out_bytes(outs) == 18


def test_bounds_are_checked():
    with pytest.raises(ValueError, match="backlog bounds"):
        Backlog(max_windows=0)
