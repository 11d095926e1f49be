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
