"""The parts of one stage worker (``slipstream.agents.worker.StageWorker`` wires them), each an object owning its state.

- ``intake.Intake``: the fetches faust's consumer hands over, admitted in one go (decode, contract,
  deadline and shedding); the bound on what the worker holds (``room``, back-pressure);
- ``windows.Windows``: the queue (``slipstream.agents.window.WindowPlanner``), the batch loop that takes windows
  when the planner says so, and the windows in flight;
- ``serve.Server``: one window worked off on one replica (variant split, sub-batches, deadline drops,
  bounded model runs);
- ``pool.ReplicaPool``: the replicas a config needs, loaded and warmed beside serving, spare replicas;
- ``commit.Commits``: a window's outputs delivered, then its inputs acked, or both committed in one
  transaction per input partition; the backlog awaiting delivery;
- ``config_switch.ConfigSwitch``: StageConfigs accepted and put in force at a window boundary; a hung
  replica replaced.

A part holds only the parts its constructor is given (windows: intake, switch, pool, server and
commits; switch: the pool) and never its caller: what it must tell (an arrival, a delivery done, a hung
replica) or ask back (how much is queued, whether delivery is blocked) goes through a callback that
``StageWorker`` wires.
"""
import logging

log = logging.getLogger("slipstream.agents.worker")  # one logger for the whole worker, whichever part speaks


def log_failure(task) -> None:
    """A background task's done-callback: its exception logged (it has no caller to raise to)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("background task failed: %r", task.exception(), exc_info=task.exception())
