"""The fault suite and the soak run on the real stack (``slipstream chaos``, ``slipstream soak``):
they start a pipeline's workers, planner service and tuner, inject faults (kill -9, SIGSTOP, broker
loss, on a cluster of their own when asked) under an open-loop replay, and report what the results
say (the arithmetic is ``slipstream.loadgen.chaos`` and ``slipstream.loadgen.soak``)."""
