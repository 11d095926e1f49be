"""The parts of one stage worker (``slipstream.agents.worker.StageWorker``), one concern each.

- ``intake``: records handed over by faust's consumer, admitted onto the window planner's queue; the
  bound on what is held (back-pressure);
- ``windows``: the batch loop that takes windows when the planner says so, and the windows in flight;
- ``serve``: working a window off on one model instance (checks, model runs, deadline drops);
- ``commit``: a window's outputs produced together, their delivery awaited, its inputs acked or
  committed in one transaction;
- ``config_switch``: StageConfigs from the control topic accepted and put in force at a window boundary;
- ``fleet``: the model instances a config needs, loaded and warmed beside serving, hung ones replaced;
- ``rebalance``: partitions revoked or assigned.

Each part is a mixin of :class:`~slipstream.agents.worker.StageWorker`: it holds no state of its own beyond what
``StageWorker.__init__`` sets, and its docstring names the attributes it owns and those it reads.
"""
import logging

# one logger for the whole worker, whichever part speaks (the name it has always had)
log = logging.getLogger("slipstream.agents.worker")
