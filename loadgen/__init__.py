"""loadgen: the measurement lab. Workload sources (Poisson, gamma, time-varying, published traces),
open-loop trace replay into a pipeline's input topic, result collection, the reports and plots of a
run (also of a simulated run through the planner's estimator), and the experiments built on them:
live runs (``slipstream.loadgen.live``), benchmarks (``slipstream.loadgen.bench``), faults and soak (``slipstream.loadgen.faults``) and
the papers' reproductions (``slipstream.loadgen.reproduce``). It may import every product layer; no product
layer imports it."""
