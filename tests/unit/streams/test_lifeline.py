"""A child given a lifeline stops when the process that started it dies, however it dies."""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import textwrap

import pytest

from slipstream.streams.procs import LIFELINE_ENV, exit_with_parent, lifeline

CHILD = textwrap.dedent("""
    import signal, threading
    from slipstream.streams.procs import LIFELINE_ENV, exit_with_parent
    import os
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    exit_with_parent(on_lost=lambda: print("parent gone", flush=True))
    print("child ready", LIFELINE_ENV in os.environ, flush=True)
    stop.wait()
    print("child stopped", flush=True)
""")

PARENT = textwrap.dedent("""
    import subprocess, sys, threading
    from slipstream.streams.procs import lifeline
    env, fds = lifeline() if sys.argv[1] == "lifeline" else (None, ())
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2]], env=env, pass_fds=fds)
    print("child pid", child.pid, flush=True)
    threading.Event().wait()
""")


def _lines_until_eof(proc_stdout, timeout_s: float) -> tuple[list[str], bool]:
    """Lines read until EOF (every holder of the pipe's write end has exited) or the timeout."""
    sel = selectors.DefaultSelector()
    sel.register(proc_stdout, selectors.EVENT_READ)
    lines = []
    try:
        while sel.select(timeout=timeout_s):
            line = proc_stdout.readline()
            if not line:
                return lines, True
            lines.append(line.strip())
    finally:
        sel.close()
    return lines, False


def _start_parent(mode: str) -> tuple[subprocess.Popen, int]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode, CHILD], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    pid = int(parent.stdout.readline().split()[-1])
    assert parent.stdout.readline().startswith("child ready")  # the child shares the parent's stdout
    return parent, pid


def test_a_child_with_a_lifeline_stops_when_its_parent_is_killed():
    parent, child_pid = _start_parent("lifeline")
    parent.kill()  # SIGKILL: no handler of the parent's runs
    parent.wait()
    lines, eof = _lines_until_eof(parent.stdout, timeout_s=30)
    if not eof:
        os.kill(child_pid, signal.SIGKILL)
    assert eof, f"the child outlived its parent; it said {lines}"
    assert lines == ["parent gone", "child stopped"]  # stopped as by SIGTERM: its handler ran


def test_without_a_lifeline_a_child_outlives_its_parent():
    """The failure the lifeline exists for: this is what a run's workers did."""
    parent, child_pid = _start_parent("none")
    parent.kill()
    parent.wait()
    try:
        lines, eof = _lines_until_eof(parent.stdout, timeout_s=2)
        assert not eof
    finally:
        os.kill(child_pid, signal.SIGKILL)


def test_the_lifeline_is_not_passed_on_and_a_stray_variable_is_ignored(monkeypatch):
    env, fds = lifeline({"A": "1"})
    assert env["A"] == "1" and env[LIFELINE_ENV] == str(fds[0])
    assert not os.get_inheritable(fds[0])  # only children given it in pass_fds hold it
    monkeypatch.setenv(LIFELINE_ENV, "987")  # copied from a shell: no such descriptor here
    assert exit_with_parent() is None
    assert LIFELINE_ENV not in os.environ  # the worker's own children do not watch its lifeline


@pytest.mark.parametrize("value", [None, "not-a-number"])
def test_no_lifeline_watches_nothing(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(LIFELINE_ENV, raising=False)
    else:
        monkeypatch.setenv(LIFELINE_ENV, value)
    assert exit_with_parent() is None
