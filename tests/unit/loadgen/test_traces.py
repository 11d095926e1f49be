"""Trace specs: the grammar, the file readers (on small generated files), and the published traces
when ../shared/research-data is present (skipped cleanly otherwise)."""
import io
import tarfile

import numpy as np
import pytest

from slipstream.loadgen import workloads as w
from slipstream.loadgen.traces import TraceSpecError, load_trace, parse_trace_spec, read_azure_counts
from tests.paths import RESEARCH_DATA as DATA

TWITTER = DATA / "reconfigurable-ml-pipeline+ipa" / "twitter_workload_per_second.tbz2"
AZURE = DATA / "vhive-serverless+invitro" / "azure2019_top10_invocations.csv"


def test_parse_examples_from_the_brief():
    s = parse_trace_spec("step:rates=20/80,at=30,duration=60")
    assert (s.kind, s.path) == ("step", None)
    assert s.numbers("rates") == [20.0, 80.0] and s.number("at") == 30.0
    s = parse_trace_spec("azure:/x/y.csv,row=3")
    assert (s.kind, s.path, s.number("row")) == ("azure", "/x/y.csv", 3.0)
    assert parse_trace_spec("twitter:/t.tbz2,start=3600").number("start") == 3600.0


@pytest.mark.parametrize("spec, message", [
    ("poisson", "KIND:ARGS"),
    ("zipf:rate=3", "KIND:ARGS"),
    ("poisson:rate=5,cv2=4,duration=1", "does not take cv2"),
    ("gamma:rate=5,rate=6,duration=1", "twice"),
    ("file:", "needs a path"),
    ("poisson:rate=5,duration=10,start=3", "start="),
    ("twitter:/a,peak=3,mean=2", "not both"),
    ("gamma:rate=abc,duration=1", "not a number"),
    ("poisson:duration=1", "needs rate="),
    ("step:rates=1/2/3,at=5,duration=9", "change times"),
])
def test_bad_specs_say_what_is_wrong(spec, message):
    with pytest.raises(TraceSpecError, match=message):
        load_trace(spec)


def test_synthetic_specs_match_their_parameters():
    a = load_trace("gamma:rate=50,cv2=4,duration=400", seed=1)
    rate, cv2 = w.inter_arrival_stats(a)
    assert rate == pytest.approx(50, rel=0.05) and cv2 == pytest.approx(4, rel=0.15)
    assert np.array_equal(a, load_trace("gamma:rate=50,cv2=4,duration=400,seed=1", seed=99))
    s = load_trace("step:rates=20/80,at=30,duration=60,transition=4,shape=linear", seed=2)
    assert s.max() < 60 and np.sum(s < 30) < np.sum(s >= 30)
    doubled = load_trace("poisson:rate=50,duration=60,scale=2", seed=3)
    assert len(doubled) / 60 == pytest.approx(100, rel=0.05)
    fast = load_trace("poisson:rate=50,duration=60,speedup=3", seed=3)
    assert fast.max() < 20.0


def test_file_source_with_comments_slice_and_peak(tmp_path):
    f = tmp_path / "arrivals.txt"
    f.write_text("# seconds\n0.5\n0.1\n\n2.0  # late\n3.5\n9.0\n")
    assert load_trace(f"file:{f}").tolist() == [0.1, 0.5, 2.0, 3.5, 9.0]
    assert load_trace(f"file:{f},start=1,duration=5").tolist() == [1.0, 2.5]
    bad = tmp_path / "bad.txt"
    bad.write_text("1\n-2\n")
    with pytest.raises(TraceSpecError, match=":2:"):
        load_trace(f"file:{bad}")


def _twitter_file(tmp_path, counts):
    data = " ".join(str(c) for c in counts).encode()
    path = tmp_path / "workload.tbz2"
    with tarfile.open(path, "w:bz2") as tar:
        info = tarfile.TarInfo("workload.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_twitter_counts_slice_and_exact_peak(tmp_path):
    counts = [5, 10, 20, 40, 20, 10, 5, 0, 5]
    path = _twitter_file(tmp_path, counts)
    a = load_trace(f"twitter:{path}", seed=1)
    assert np.bincount(a.astype(int), minlength=9).tolist() == counts
    part = load_trace(f"twitter:{path},start=2,duration=3", seed=1)
    assert np.bincount(part.astype(int), minlength=3).tolist() == [20, 40, 20]
    peak = load_trace(f"twitter:{path},peak=100", seed=1)
    per_s = np.bincount(peak.astype(int), minlength=9)
    assert per_s.max() == 100  # counts are scaled before spreading: the peak is exact
    assert per_s.tolist() == pytest.approx([c * 2.5 for c in counts], abs=1)
    # InferLine-style re-timing: each second replayed for 2 s at the same rate
    slow = load_trace(f"twitter:{path},bin=2", seed=1)
    assert slow.max() < 18 and len(slow) == pytest.approx(2 * sum(counts), abs=3)
    # the plain text file works too
    txt = tmp_path / "workload.txt"
    txt.write_text(" ".join(map(str, counts)))
    assert len(load_trace(f"twitter:{txt}")) == sum(counts)


def _azure_file(tmp_path, rows):
    head = "HashOwner,HashApp,HashFunction,Trigger," + ",".join(str(i) for i in range(1, len(rows[0]) + 1))
    lines = [head] + [f"o{i},a{i},f{i},http," + ",".join(map(str, r)) for i, r in enumerate(rows)]
    path = tmp_path / "inv.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_azure_rows_minutes_and_rebinning(tmp_path):
    path = _azure_file(tmp_path, [[60, 120, 0], [600, 1200, 300]])
    assert read_azure_counts(path, 1).tolist() == [600, 1200, 300]
    a = load_trace(f"azure:{path},row=1", seed=4)
    assert np.bincount((a // 60).astype(int), minlength=3).tolist() == [600, 1200, 300]
    # one minute per 30 s at the minute's rate (InferLine's replay of a per-minute trace)
    fast = load_trace(f"azure:{path},row=1,bin=30,peak=40", seed=4)
    per_bin = np.bincount((fast // 30).astype(int), minlength=3)
    assert per_bin.tolist() == [600, 1200, 300]  # 40 qps x 30 s = 1200 at the peak
    with pytest.raises(TraceSpecError, match="out of range"):
        load_trace(f"azure:{path},row=2")


@pytest.mark.skipif(not TWITTER.exists(), reason="research-data Twitter trace not present")
def test_published_twitter_trace_slice():
    a = load_trace(f"twitter:{TWITTER},start=3600,duration=300", seed=0)
    assert a.min() >= 0 and a.max() < 300
    assert 10 < len(a) / 300 < 400  # the trace's per-second counts are 0..388


@pytest.mark.skipif(not AZURE.exists(), reason="research-data Azure trace not present")
def test_published_azure_trace_peak():
    a = load_trace(f"azure:{AZURE},row=8,start=0,duration=3600,peak=50", seed=0)
    per_min = np.bincount((a // 60).astype(int), minlength=60) / 60
    assert per_min.max() == pytest.approx(50, abs=0.05)


def test_first_step_is_where_a_step_trace_starts_to_change():
    """The demo's default planning sample: the quiet phase before the first step."""
    from slipstream.loadgen.traces import first_step_s, load_trace

    spec = "step:rates=6/18/6,at=45/105,cv2=4,transition=5,duration=240"
    assert first_step_s(spec) == 45.0
    assert first_step_s(spec.replace("duration=240", "duration=240,speedup=3")) == 15.0
    assert first_step_s("gamma:rate=5,cv2=4,duration=60") is None
    for speedup in (1, 2):  # the trace itself steps there: ~5 qps until the step, far more after it
        step = f"step:rates=5/50,at=60,transition=5,duration=120,speedup={speedup}"
        a, t = load_trace(step, seed=0), first_step_s(step)
        before = np.sum(a < t) / t
        after = np.sum((a >= t + 10 / speedup) & (a < t + 20 / speedup)) / (10 / speedup)
        assert before < 6 * speedup and after > 30 * speedup  # speedup compresses time, so rates rise
