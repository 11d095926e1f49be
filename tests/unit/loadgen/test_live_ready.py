"""A live run replays only once its own workers are ready: a report folder's worker logs are appended
to run after run, so a ready line of an earlier run must not count."""
from slipstream.loadgen.live.run import ready_since


def test_ready_lines_of_an_earlier_run_do_not_count(tmp_path):
    log = tmp_path / "classify-1.log"
    log.write_text("slipstream-worker ready stage=classify partitions=4 metrics=127.0.0.1:1 at_ns=100\n")
    assert ready_since(tmp_path, "classify", 100)
    assert not ready_since(tmp_path, "classify", 101)  # the earlier run's line
    assert not ready_since(tmp_path, "resize", 0)
    with log.open("a") as f:
        f.write("slipstream-worker ready stage=classify partitions=0 metrics=127.0.0.1:1 at_ns=300\n")
    assert not ready_since(tmp_path, "classify", 200)  # no partitions yet
    with log.open("a") as f:
        f.write("slipstream-worker ready stage=classify partitions=12 metrics=127.0.0.1:1 at_ns=400\n")
    assert ready_since(tmp_path, "classify", 200)
