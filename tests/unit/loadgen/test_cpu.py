"""Processes named by their command line for the CPU sampler (``slipstream.loadgen.cpu``), and what it counts."""
import os
import time

from slipstream.loadgen.cpu import SELF, CpuSampler, kind_of


def test_processes_are_named_by_their_role():
    assert kind_of(["/usr/bin/java", "-cp", "x", "kafka.Kafka", "server.properties"]) == "broker"
    assert kind_of(["python", "-m", "slipstream.cli", "worker", "--pipeline", "p.yaml", "--stage", "resize"]) == \
        "worker resize"
    assert kind_of(["python", "-m", "slipstream.cli", "worker", "--pipeline", "p.yaml", "--stage", "join"]) == "join"
    assert kind_of(["python", "-m", "slipstream.cli", "gateway", "--pipeline", "p.yaml"]) == "gateway"
    assert kind_of([".venv/bin/slipstream", "compare-live", "--modes", "milp"]) == SELF
    assert kind_of(["bash", "-c", "worker"]) is None and kind_of([]) is None


def test_the_sampler_counts_this_process_cpu_since_it_started():
    sampler = CpuSampler(period_s=0.05).start()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:  # burn 0.3 s of CPU
        pass
    used = sampler.stop()
    assert 0.2 <= used[SELF] <= 0.3 + 2.0 * os.cpu_count(), used
