"""The metrics address: HOST:PORT, parsed and checked at the edge."""
import pytest

from slipstream.streams.metrics_http import MetricsAddr


@pytest.mark.parametrize("text,host,port", [("0.0.0.0:9100", "0.0.0.0", 9100), ("127.0.0.1:0", "127.0.0.1", 0),
                                            ("[::]:9100", "::", 9100), ("localhost:80", "localhost", 80)])
def test_parse(text, host, port):
    a = MetricsAddr.parse(text)
    assert (a.host, a.port) == (host, port)
    assert MetricsAddr.parse(str(a)) == a


@pytest.mark.parametrize("bad", ["9100", "host:", ":9100", "h:70000", "h:port"])
def test_bad_address_is_named(bad):
    with pytest.raises(ValueError, match="metrics address"):
        MetricsAddr.parse(bad)
