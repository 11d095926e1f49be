"""Where replicas run: instances inside as few workers as hold them, within the host's cores."""
import pytest

from streams.placement import Layout, cores_left, layout


@pytest.mark.parametrize("replicas,cap,want", [(1, 4, Layout(1, 1)), (4, 4, Layout(1, 4)),
                                               (5, 4, Layout(2, 3)), (8, 4, Layout(2, 4)),
                                               (3, 1, Layout(3, 1))])
def test_layout_uses_the_fewest_workers_and_spreads_instances_evenly(replicas, cap, want):
    got = layout(replicas, cap)
    assert got == want and got.replicas >= replicas and got.instances <= cap


def test_layout_rejects_nonsense():
    with pytest.raises(ValueError):
        layout(0, 4)
    with pytest.raises(ValueError):
        layout(2, 0)


def test_cores_left_counts_cores_not_wholly_reserved():
    assert cores_left(0.5, cpu_count=2) == 2
    assert cores_left(1.0, cpu_count=2) == 1
    assert cores_left(1.5, cpu_count=4) == 3
    assert cores_left(8.0, cpu_count=2) == 1  # never below one
    with pytest.raises(ValueError):
        cores_left(-1, cpu_count=2)
