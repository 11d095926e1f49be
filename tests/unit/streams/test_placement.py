"""Where replicas run: inside as few workers as hold them, within the host's cores."""
import pytest

from slipstream.streams.placement import (Layout, available_cpus, cgroup_cpu_limit, cores_left, cpu_limit_of, replica_cap,
                               layout)


@pytest.mark.parametrize("replicas,cap,want", [(1, 4, Layout(1, 1)), (4, 4, Layout(1, 4)),
                                               (5, 4, Layout(2, 3)), (8, 4, Layout(2, 4)),
                                               (3, 1, Layout(3, 1))])
def test_layout_uses_the_fewest_workers_and_spreads_replicas_evenly(replicas, cap, want):
    got = layout(replicas, cap)
    assert got == want and got.replicas >= replicas and got.per_worker <= cap


def test_layout_rejects_nonsense():
    with pytest.raises(ValueError):
        layout(0, 4)
    with pytest.raises(ValueError):
        layout(2, 0)
    with pytest.raises(ValueError):
        layout(2, 4, standby=-1)


@pytest.mark.parametrize("replicas,cap,standby,processes", [(1, 2, 0, 1), (1, 2, 1, 2), (5, 4, 1, 3), (3, 1, 2, 5)])
def test_standby_workers_add_processes_not_replicas(replicas, cap, standby, processes):
    got = layout(replicas, cap, standby)
    plain = layout(replicas, cap)
    assert got.processes == processes == plain.workers + standby
    # each standby holds as many replicas as the others; the plan's replicas are unchanged
    assert (got.workers, got.per_worker, got.replicas) == (plain.workers, plain.per_worker, plain.replicas)


def test_cores_left_counts_cores_not_wholly_reserved():
    assert cores_left(0.5, cpu_count=2) == 2
    assert cores_left(1.0, cpu_count=2) == 1
    assert cores_left(1.5, cpu_count=4) == 3
    assert cores_left(8.0, cpu_count=2) == 1  # never below one
    with pytest.raises(ValueError):
        cores_left(-1, cpu_count=2)


# ------------------------------------------------------------------ the cgroup's CPU limit


def cgroup_files(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("files,want", [
    ({"cpu.max": "200000 100000\n"}, 2.0),  # v2: a pod with limits.cpu: 2
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu.max": "max 100000\n"}, None),  # v2, no limit
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3.0),  # v1
    ({"cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no limit
    ({}, None),  # no cgroup filesystem
])
def test_the_cgroup_cpu_limit_is_read_from_v2_or_v1_files(tmp_path, files, want):
    got = cgroup_cpu_limit(cgroup_files(tmp_path, files), own="0::/\n")
    assert got == pytest.approx(want) if want is not None else got is None


@pytest.mark.parametrize("files,own,want", [
    # a v1 group made on the host (cgcreate, systemd CPUQuota): the process's own group, not the mount's
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n",
      "cpu/stress/cpu.cfs_quota_us": "90000\n", "cpu/stress/cpu.cfs_period_us": "100000\n"},
     "2:cpuacct:/\n1:cpu:/stress\n0::/\n", 0.9),
    # a tighter parent bounds its child
    ({"cpu,cpuacct/a/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/a/cpu.cfs_period_us": "100000\n",
      "cpu,cpuacct/a/b/cpu.cfs_quota_us": "200000\n", "cpu,cpuacct/a/b/cpu.cfs_period_us": "100000\n"},
     "3:cpu,cpuacct:/a/b\n", 0.5),
    # v2 on the host: the slice's cpu.max, its parent's "max" is no bound
    ({"cgroup.controllers": "cpu\n", "user.slice/cpu.max": "max 100000\n",
      "user.slice/run.scope/cpu.max": "150000 100000\n"}, "0::/user.slice/run.scope\n", 1.5),
    # a container without its own cgroup namespace: the named path is not under the mount, the root is
    ({"cpu.max": "200000 100000\n"}, "0::/docker/abc\n", 2.0),
])
def test_the_cpu_limit_is_the_tightest_on_the_processs_own_group_and_its_ancestors(tmp_path, files, own, want):
    assert cgroup_cpu_limit(cgroup_files(tmp_path, files), own=own) == pytest.approx(want)


def test_available_cpus_is_the_limit_not_the_nodes_count():
    assert available_cpus(limit=2.0, cpu_count=64) == 2
    assert available_cpus(limit=2.5, cpu_count=64) == 2  # a fraction of a core is no model thread
    assert available_cpus(limit=0.5, cpu_count=64) == 1  # never below one
    assert available_cpus(limit=8.0, cpu_count=4) == 4
    assert cpu_limit_of("max 100000") is None and cpu_limit_of(None, "-1", "100000") is None


@pytest.mark.parametrize("asked,limit,cpus,want", [
    (None, 3.0, 64, 3),  # a pod limited to 3 CPUs on a 64-core node holds 3 replicas, not 64
    (None, None, 64, 64),  # no limit: the host's cores (a local run)
    (2, 3.0, 64, 2),  # the manifests' --max-replicas within the limit
    (5, 3.0, 64, 3),  # more than the pod's CPUs allow: bounded by them
    (4, None, 2, 4),  # no limit: an explicit count is the caller's (local tests oversubscribe on purpose)
])
def test_a_workers_replicas_are_bounded_by_its_cgroup(asked, limit, cpus, want):
    assert replica_cap(asked, limit, cpu_count=cpus) == want
