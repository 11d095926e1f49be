"""Integration tests run against a real Kafka broker, reached through the one `kafka` fixture:

- ``SLIPSTREAM_BOOTSTRAP`` set: that cluster (CI's .ci/run starts the local KRaft broker and sets it);
- else, with ``SLIPSTREAM_TESTCONTAINERS=1``, a testcontainers Kafka container (needs a Docker engine
  that can pull Kafka's image); a running engine alone never changes the broker (CI runs one for the
  image tests);
- else the local KRaft broker of `slipstream kafka up`, started here and stopped at the end if this
  session started it.

A broker that cannot be had is an error, not a skip: a green run that ran nothing would be a lie.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from slipstream.streams import broker
from slipstream.streams.config import KafkaSettings



def pytest_collection_modifyitems(config, items):
    """Every test under tests/integration needs the broker: mark them all `broker`."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.broker)


def _docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def kafka() -> KafkaSettings:
    if os.environ.get("SLIPSTREAM_BOOTSTRAP"):
        settings = KafkaSettings.from_env()
        if not broker.is_ready(settings.bootstrap, 10.0):
            pytest.fail(f"SLIPSTREAM_BOOTSTRAP={settings.bootstrap} does not answer metadata requests")
        yield settings
        return
    if os.environ.get("SLIPSTREAM_TESTCONTAINERS") == "1" and _docker_engine():
        try:
            from testcontainers.kafka import KafkaContainer
        except ImportError:
            pass
        else:
            with KafkaContainer() as kc:
                yield KafkaSettings(bootstrap=kc.get_bootstrap_server())
            return
    b = broker.default_broker()
    started = broker.running_pid(b) is None
    try:
        broker.up(b, progress=lambda _: None)
    except broker.BrokerError as exc:
        pytest.fail(f"no Kafka broker for the integration tests: {exc}")
    yield KafkaSettings(bootstrap=b.bootstrap)
    if started:
        broker.down(b, progress=lambda _: None)


@pytest.fixture
def unique() -> str:
    """A fresh name for topics, groups and pipelines of one test."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
def own_broker(tmp_path):
    """A single KRaft broker of the test's own (port 19220, state in the test's folder), which the test
    may freeze or kill: never the shared one. Stopped at the end."""
    b = broker.default_broker(tmp_path / "own-kafka", 19220)
    try:
        broker.up(b, progress=lambda _: None)
        yield b
    finally:
        broker.down(b, progress=lambda _: None)
