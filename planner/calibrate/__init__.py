"""Calibration: what the profiles do not say, fitted from live runs' hop timings and handed to the
estimator. Three parts:

- ``fit`` (with ``hops``, the reading of a run's hop timings): runs -> one calibration document;
- ``store``: a new document merged with the version before it, and its text for a person;
- ``apply``: a document -> the estimator's parameters, and a problem's curves rescaled by it.

The names below are the package's interface; each is defined once, in its part.
"""
from .apply import (MIN_CV, host_model, network, profiled_curves, quantiles, recalibrated,
                                     service_time)
from .fit import (QUANTILES, SCALE_BIN, SLOWDOWN_WINDOW_S, SPREAD_BIN, CalibrationFitError, fit,
                                   fit_host, fit_runs, lognormal_cv, run_pace, service_scales, shrunk_means, slowdown,
                                   spread_by_duration)
from .hops import (RunHops, batch_hops, batches, components, configs_in_force, dispatch_ms,
                                    hop_kind, mean_concurrency, timeouts_of)
from .store import carried_forward, merged_sizes, merged_spread, summary_lines

__all__ = ["CalibrationFitError", "MIN_CV", "QUANTILES", "RunHops", "SCALE_BIN", "SLOWDOWN_WINDOW_S", "SPREAD_BIN",
           "batch_hops", "batches", "carried_forward", "components", "configs_in_force", "dispatch_ms", "fit",
           "fit_host", "fit_runs", "hop_kind", "host_model", "lognormal_cv", "mean_concurrency", "merged_sizes",
           "merged_spread", "network", "profiled_curves", "quantiles", "recalibrated", "run_pace",
           "service_scales", "service_time", "shrunk_means", "slowdown", "spread_by_duration", "summary_lines",
           "timeouts_of"]
