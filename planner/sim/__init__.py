"""The estimator's discrete-event simulator, one concern per module (``slipstream.planner.estimator.simulate`` is
the entry point): ``params`` (validated parameters), ``engine`` (the event heap), ``servers`` (queues
and model threads), ``groups`` (in-worker and rebalance scaling), ``host`` (processor sharing),
``stages`` (routing and fan-out), ``world`` (shared context, building), ``record`` (the log and the
result), ``stagewise`` (the fast path when nothing couples the stages in time)."""
