"""loadgen: workload sources (Poisson, gamma, time-varying, published traces), open-loop trace replay
into a pipeline's input topic, result collection, and the reports and plots of a run (also of a
simulated run through the planner's estimator)."""
