"""Processes named by their command line for the CPU sampler (``slipstream.loadgen.cpu``), and what it counts."""
import os
import subprocess
import sys
import time

from slipstream.loadgen.cpu import SELF, SENDER, CpuSampler, kind_of, listening_inodes, ours, ports_of


def test_processes_are_named_by_their_role():
    assert kind_of(["/usr/bin/java", "-cp", "x", "kafka.Kafka", "server.properties"]) == "broker"
    assert kind_of(["python", "-m", "slipstream.cli", "worker", "--pipeline", "p.yaml", "--stage", "resize"]) == \
        "worker resize"
    assert kind_of(["python", "-m", "slipstream.cli", "worker", "--pipeline", "p.yaml", "--stage", "join"]) == "join"
    assert kind_of(["python", "-m", "slipstream.cli", "gateway", "--pipeline", "p.yaml"]) == "gateway"
    assert kind_of([".venv/bin/slipstream", "compare-live", "--modes", "milp"]) == SELF
    assert kind_of(["/usr/bin/python3", "-m", "slipstream.loadgen.sender"]) == SENDER
    assert kind_of(["bash", "-c", "worker"]) is None and kind_of([]) is None


def test_the_sampler_counts_this_process_cpu_since_it_started():
    sampler = CpuSampler(period_s=0.05).start()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:  # burn 0.3 s of CPU
        pass
    used = sampler.stop()
    assert 0.2 <= used[SELF] <= 0.3 + 2.0 * os.cpu_count(), used


def test_a_run_owns_its_roots_and_their_descendants_only():
    parent = {"10": "1", "11": "10", "12": "11", "20": "1", "21": "20", "30": "1"}
    assert ours({"10", "30"}, parent) == {"10", "11", "12", "30"}
    assert ours({"99"}, parent) == {"99"}  # a root with no children


TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:4BD8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0
   1: 0100007F:4A8C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0
   2: 0100007F:4BD8 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0
"""


def test_the_run_broker_is_the_one_listening_on_its_bootstrap_port():
    assert ports_of("127.0.0.1:19416,127.0.0.1:19418") == {19416, 19418}
    # 0x4BD8 = 19416 listening (inode 111); 0x4A8C = 19084 is another run's broker; 333 is a connection
    assert listening_inodes({19416}, [TCP]) == {"111"}
    assert listening_inodes({19092}, [TCP]) == set()


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far, from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_sampler_leaves_other_processes_on_the_host_out():
    # a busy process that is no descendant of this one (its shell parent exits at once), as another
    # run's broker or worker is
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 5: pass"
    pid = int(subprocess.run(["sh", "-c", f'{sys.executable} -c "{code}" >/dev/null 2>&1 & echo $!'],
                             capture_output=True, text=True, check=True).stdout)
    try:
        mine = CpuSampler(period_s=0.05).start()
        theirs = CpuSampler(period_s=0.05, roots=[pid]).start()
        since, deadline = _cpu_s(pid), time.monotonic() + 30.0
        while _cpu_s(pid) - since < 0.3 and time.monotonic() < deadline:  # however busy the host is
            time.sleep(0.05)
        used, other = mine.stop(), theirs.stop()
    finally:
        os.kill(pid, 9)
    assert used.get("other", 0) < 0.1, used  # its 0.3 s are not this run's (an idle child of pytest may be)
    assert other.get("other", 0) > 0.2, other  # the same process, counted when it is the root


def test_a_process_started_during_the_run_counts_whole_however_late_it_is_found():
    sampler = CpuSampler(period_s=0.05, rescan_s=60.0).start()  # no rescan before stop()
    code = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
            "print('busy', flush=True)\ntime.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "busy\n"  # its 0.3 s of CPU are spent, however slow the host
        used = sampler.stop()
    finally:
        child.kill()
        child.wait()
    assert used.get("other", 0) >= 0.25, used  # its CPU before it was found is counted
