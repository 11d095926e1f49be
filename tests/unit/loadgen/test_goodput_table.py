"""The goodput table says, beside each run, how far behind its schedule the load generator fell: it
shares the host with the pipeline, and a generator that falls behind measures itself."""
from slipstream.loadgen.bench.goodput import GoodputRow, format_rows, trace_for


def row(lag_ms):
    return GoodputRow("milp+tuner", "kafka", trace_for("poisson", 105.0, 35.0, 60.0), 105.0, 6300, 2100, 60.0,
                      1 / 3, 0.753, {"shed": 4000, "deadline": 200}, {"load generator": 12.6}, lag_ms)


def test_each_row_reports_goodput_and_the_senders_p99_lag():
    table = format_rows([row(7.25), row(None)])
    header, late, unknown = table.splitlines()
    assert "send lag p99" in header
    assert late.split()[4:9] == ["35.0", "33.33%", "0.753", "7.2", "ms"]  # goodput: 2100 in the SLO over 60 s
    assert "2.00 ms/r" in late  # the load generator's CPU per request sent
    assert unknown.split()[7] == "-"
