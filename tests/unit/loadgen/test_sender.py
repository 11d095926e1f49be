"""The sender process's job travels as JSON (no pickle) and comes back whole."""
import subprocess
import sys

import numpy as np

from slipstream.loadgen.sender import ReplayTarget, SendJob
from slipstream.streams.config import KafkaSettings


def test_a_send_job_round_trips_through_json():
    offsets = np.array([0, 5, 5, 2**40 + 3], dtype=np.int64)
    job = SendJob(ReplayTarget("p", "s", 250.0, "image/jpeg", accuracy_floor=0.7),
                  KafkaSettings(bootstrap="127.0.0.1:19092,127.0.0.1:19093", processing="exactly-once"),
                  "run-1", offsets, b"\x00\xffpayload", lead_s=1.5, ready_timeout_s=30.0)
    back = SendJob.from_json(job.to_json())
    assert (back.target, back.settings, back.run_id, back.payload, back.lead_s, back.ready_timeout_s) == \
        (job.target, job.settings, job.run_id, job.payload, job.lead_s, job.ready_timeout_s)
    assert back.offsets_ns.dtype == np.int64 and back.offsets_ns.tolist() == offsets.tolist()


def test_the_sender_runs_round_robin_real_time_exactly_when_it_says_so():
    """In a process of its own (this one's scheduling stays as it is): ``realtime()`` is True exactly
    when the process then runs under SCHED_RR, and False, with the policy unchanged, where refused."""
    code = ("import os; from slipstream.loadgen.sender import realtime; ok = realtime(); "
            "print(ok, os.sched_getscheduler(0) == os.SCHED_RR)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    said, is_rr = out.stdout.split()
    assert said == is_rr
