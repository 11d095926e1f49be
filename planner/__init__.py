"""planner: the slow, thorough half of the control plane. Owns the profiler and profile store, the
planning problem, the discrete-event estimator (which runs the agents' batching policy from
``slipstream.streams.batching``), the planner modes (milp, inferline, loki, cg-mean, cg-peak) and the planner
service that publishes StageConfig records. Talks to the data plane only through topics."""
