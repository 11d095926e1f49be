"""Plots are written from the Summary alone, as real non-empty PNGs."""
import numpy as np

from slipstream.loadgen.cost import ConfigEvent
from slipstream.loadgen.plots import write_plots
from slipstream.loadgen.report import scale_events
from slipstream.loadgen.render import write_report
from slipstream.loadgen.report import Envelope, summarize
from tests.control_records import result

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def test_every_plot_is_a_png(tmp_path):
    rng = np.random.default_rng(0)
    res = []
    for i in range(600):
        c = T0 + i * 50 * MS
        lat = int(rng.gamma(2.0, 20.0) * MS)
        res.append(result(request_id=f"r-{i}", created_ns=c, deadline_ns=c + 100 * MS, finished_ns=c + lat,
                          accuracy=0.9))
    ev = [ConfigEvent(T0, "a", 1, 0.1), ConfigEvent(T0 + 15_000 * MS, "a", 3, 0.3)]
    env = Envelope((0.5, 1.0, 2.0, 4.0), (40.0, 30.0, 25.0, 21.0), (35.0, 28.0, 24.0, 20.0))
    s = summarize(res, slo_ms=100, configs=ev, envelope=env, label="plot-test")
    paths = write_plots(s, tmp_path / "plots")
    assert [p.name for p in paths] == ["latency.png", "cdf.png", "cost.png", "envelope.png"]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    no_env = write_report(summarize(res, slo_ms=100), tmp_path / "report")
    assert "envelope.png" not in {p.name for p in no_env} and len(no_env) == 5


def test_scale_events_are_read_from_the_replica_series():
    res = [result(request_id=f"r-{i}", created_ns=T0 + i * 100 * MS, deadline_ns=T0 + i * 100 * MS + 100 * MS,
                  finished_ns=T0 + i * 100 * MS + 5 * MS) for i in range(400)]
    ev = [ConfigEvent(T0, "a", 1, 0.1), ConfigEvent(T0, "b", 2, 0.2), ConfigEvent(T0 + 12_000 * MS, "a", 2, 0.2),
          ConfigEvent(T0 + 30_000 * MS, "a", 1, 0.1)]
    s = summarize(res, slo_ms=100, configs=ev, window_s=1.0)
    got = scale_events(s)
    assert [(stage, a, b) for _, stage, a, b in got] == [("a", 1, 2), ("a", 2, 1)]
    assert [round(t) for t, *_ in got] == [12, 30]


def test_accuracy_per_window_is_the_mean_of_the_requests_done_and_modes_plot_side_by_side(tmp_path):
    """A run that serves 0.8 for 10 s, then 0.6 (and drops every third request there): the per-window
    accuracy follows the requests done only; the modes plot draws two such runs as one PNG."""
    from slipstream.loadgen.plots import plot_modes
    from slipstream.loadgen.render import read_summary

    res = []
    for i in range(200):
        c = T0 + i * 100 * MS
        late = i >= 100 and i % 3 == 0
        res.append(result(request_id=f"r-{i}", status="dropped" if late else "done", reason="deadline: x",
                          created_ns=c, deadline_ns=c + 100 * MS, finished_ns=c + 5 * MS,
                          accuracy=0.1 if late else (0.8 if i < 100 else 0.6)))
    s = summarize(res, slo_ms=100, configs=[ConfigEvent(T0, "a", 1, 0.1)], window_s=1.0)
    acc = np.asarray(s.series.accuracy)
    assert np.allclose(acc[:10], 0.8) and np.allclose(acc[10:20], 0.6)
    back = read_summary(write_report(s, tmp_path / "r")[0].parent / "summary.json")
    assert np.allclose(back.series.accuracy[:20], acc[:20])
    path = plot_modes({"a": s, "b": back}, tmp_path / "modes.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
