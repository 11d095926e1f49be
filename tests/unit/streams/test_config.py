"""The Kafka settings the environment gives: the workers' session timeout."""
import pytest

from slipstream.streams.config import DEFAULT_SESSION_TIMEOUT_S, KafkaSettings


def test_the_session_timeout_comes_from_the_environment_and_is_checked():
    assert KafkaSettings.from_env({}).session_timeout_s == DEFAULT_SESSION_TIMEOUT_S == 2.0
    assert KafkaSettings.from_env({"SLIPSTREAM_SESSION_TIMEOUT_S": "7.5"}).session_timeout_s == 7.5
    with pytest.raises(ValueError, match="SLIPSTREAM_SESSION_TIMEOUT_S must be a number, got 'soon'"):
        KafkaSettings.from_env({"SLIPSTREAM_SESSION_TIMEOUT_S": "soon"})
    with pytest.raises(ValueError, match=r"session_timeout_s must be in \(0, 3600\]"):
        KafkaSettings.from_env({"SLIPSTREAM_SESSION_TIMEOUT_S": "-1"})


def test_a_workers_heartbeat_is_a_quarter_of_its_session_timeout():
    from slipstream.streams.app import AppSettings, make_app

    app = make_app(AppSettings("t-config", KafkaSettings(session_timeout_s=2.0)))
    assert app.conf.broker_session_timeout == 2.0 and app.conf.broker_heartbeat_interval == 0.5


def test_the_process_settings_read_their_variables_with_their_defaults():
    from slipstream.streams import config as c

    assert c.bootstrap_from_env({}) is None and c.bootstrap_from_env({c.BOOTSTRAP_ENV: ""}) is None
    assert c.bootstrap_from_env({c.BOOTSTRAP_ENV: "k:9092"}) == "k:9092"
    assert c.cache_from_env({}) is None and c.cache_from_env({c.CACHE_ENV: "/m"}) == "/m"
    assert c.stage_from_env({c.PIPELINE_ENV: "p.yaml", c.STAGE_ENV: "s"}) == ("p.yaml", "s")
    assert c.stage_from_env({}) == (None, None)
    assert c.metrics_addr_from_env("127.0.0.1:0", {}) == "127.0.0.1:0"
    assert c.metrics_addr_from_env("127.0.0.1:0", {c.METRICS_ADDR_ENV: "0.0.0.0:9100"}) == "0.0.0.0:9100"
    assert not c.metrics_port_set({}) and c.metrics_port_set({c.METRICS_PORT_ENV: "9100"})
    assert c.calibration_from_env({}) == "latest" and c.calibration_from_env({c.CALIBRATION_ENV: "off"}) == "off"


def test_the_lifeline_variable_is_taken_once(monkeypatch):
    from slipstream.streams import config as c

    monkeypatch.setenv(c.LIFELINE_ENV, "7")
    assert c.take_lifeline_fd() == "7" and c.take_lifeline_fd() is None
