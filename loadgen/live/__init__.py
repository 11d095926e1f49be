"""Live runs on the real broker (``slipstream demo``, ``compare-live``, ``estimate``, ``calibrate``):
plan, publish, start the workers with the tuner on top, replay a trace open-loop, write the run's
report folder, and fit or check the estimator's calibration against it."""
