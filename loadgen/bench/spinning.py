"""Two model replicas sharing the host's cores, with onnxruntime's thread spinning on and off:
``python -m slipstream.loadgen.bench.spinning [SECONDS]``. Each of two processes runs EfficientNet-Lite0 (the
image-classify pipeline's lite0, 2 intra-op threads) one batch of 1 at a time with a random 0-30 ms
gap, as stage workers do between batches; the runs alternate on, off, on, off and print the batch
latency of both processes. ``slipstream.agents.executors.OrtBackend`` turns spinning off (docs/results.md)."""
from __future__ import annotations

import multiprocessing as mp
import random
import statistics
import sys
import time

SPINNING = "session.intra_op.allow_spinning"


def replica(spin: str, out: mp.Queue, seconds: float) -> None:
    import onnxruntime as ort

    from ...agents.zoo import load_executor
    from ...streams.assets import deploy_dir
    from ...streams.spec import load_pipeline

    set_entry = ort.SessionOptions.add_session_config_entry
    ort.SessionOptions.add_session_config_entry = (  # the backend's own setting, overridden here only
        lambda self, k, v: set_entry(self, k, spin if k == SPINNING else v))
    pipe = load_pipeline(deploy_dir() / "pipelines" / "image-classify.yaml")
    classify = next(st for st in pipe.stages if st.name == "classify")
    ex = load_executor(classify.variant("lite0"), pipe.hardware["cpu-2"])
    payload = ex.example_payload()
    for _ in range(5):
        ex.run([payload])
    rng, ms, end = random.Random(), [], time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        ex.run([payload])
        ms.append((time.perf_counter() - t0) * 1000)
        time.sleep(rng.uniform(0, 0.03))
    out.put(ms)


def main(seconds: float = 12.0) -> None:
    for spin in ("1", "0", "1", "0"):
        out = mp.Queue()
        procs = [mp.Process(target=replica, args=(spin, out, seconds)) for _ in range(2)]
        for p in procs:
            p.start()
        ms = sorted(t for _ in procs for t in out.get())
        for p in procs:
            p.join()
        print(f"spinning {'on ' if spin == '1' else 'off'}: {len(ms)} batches, p50 {statistics.median(ms):.1f} ms, "
              f"p99 {ms[int(0.99 * len(ms))]:.1f} ms", flush=True)


if __name__ == "__main__":
    main(*(float(a) for a in sys.argv[1:2]))
