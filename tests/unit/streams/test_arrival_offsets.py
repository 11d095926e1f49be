"""Arrival timestamps from offsets (slipstream.streams.control_io): counts per step, spread evenly over it."""
import numpy as np

from slipstream.streams.control_io import OffsetCounter, spread


def test_spread_places_n_arrivals_evenly_ending_at_the_step_end():
    assert spread(4, 100, 200).tolist() == [125, 150, 175, 200]
    assert spread(0, 100, 200).size == 0 and spread(1, 100, 100).tolist() == [100]


def test_counter_counts_offset_growth_per_partition_since_the_last_snapshot():
    c = OffsetCounter()
    assert c.observe({"a": 10, "b": 5}, 1_000).size == 0  # baseline: nothing counted twice
    stamps = c.observe({"a": 13, "b": 6}, 2_000)
    assert stamps.tolist() == [1_250, 1_500, 1_750, 2_000]
    # a partition added later counts from its first snapshot; offsets never go back
    assert c.observe({"a": 13, "b": 6, "c": 7}, 3_000).size == 0
    assert c.observe({"a": 14, "b": 6, "c": 9}, 4_000).size == 3


def test_the_count_is_the_offset_difference_whatever_the_payload_size():
    c = OffsetCounter()
    c.observe({"p": 0}, 0)
    total = sum(len(c.observe({"p": o}, t)) for t, o in enumerate(np.cumsum([3, 0, 7, 1]) , start=1))
    assert total == 11
