"""The garbage collector's settling, in a process of its own (it freezes the whole process)."""
import subprocess
import sys

CODE = """
import gc
from slipstream.streams.settle import GC_THRESHOLDS, settle_gc
before = gc.get_threshold()
kept = [object() for _ in range(1000)]
assert settle_gc() is True
frozen = gc.get_freeze_count()
assert frozen >= 1000, frozen
assert gc.get_threshold() == GC_THRESHOLDS != before
more = [[] for _ in range(500)]
assert settle_gc() is False  # a worker settles once: a later rebalance freezes nothing new
assert gc.get_freeze_count() == frozen
assert settle_gc(again=True) is True  # a load generator before its next replay: what planning left
assert gc.get_freeze_count() >= frozen + 500
print("ok")
"""


def test_settle_gc_freezes_once_unless_asked_again_and_collects_less_often():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
