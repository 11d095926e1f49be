"""The broker the suite runs against is the Kafka release it claims to test, in the broker's own words.

CI runs the integration suite twice (``.ci/run``): against the default release and against the oldest
supported one, naming each with ``SLIPSTREAM_KAFKA_VERSION``. The broker's ApiVersions v3 answer
(``slipstream.streams.broker.broker_version``) names the newest metadata.version it supports, whose release
(e.g. ``4.4`` of ``4.4-IV2``) must be the one asked for: a pass that silently ran the other release
would prove nothing about it.
"""
from __future__ import annotations

import aiokafka

from slipstream.streams import broker
from slipstream.streams.config import kafka_version_from_env


def test_the_broker_is_the_release_under_test(kafka):
    wanted = broker.release(kafka_version_from_env())  # unset: the default
    said = broker.broker_version(kafka.bootstrap, 10.0)
    assert said is not None, f"{kafka.bootstrap} did not answer ApiVersions v3"
    major_minor = ".".join(wanted.version.split(".")[:2])
    assert said["metadata_version_max"].startswith(major_minor + "-"), (said, wanted.version)
    # the finalized level is the cluster's: a fresh cluster of this release runs its newest one
    assert said["metadata_version"] == said["metadata_version_max"], said


def test_every_request_aiokafka_sends_has_a_version_the_broker_serves(kafka):
    """KIP-896 (Kafka 4.0) removed old request versions: aiokafka picks, per request, the newest version
    both sides know; every request type it has must still find one (none falls below the broker's floor)."""
    import asyncio
    import importlib
    import inspect

    from aiokafka.protocol.api import Request

    apis = asyncio.run(broker.broker_features(kafka.bootstrap, 10.0))["api_versions"]
    none = []
    for name in ("admin", "commit", "coordination", "fetch", "group", "metadata", "offset", "produce", "transaction"):
        mod = importlib.import_module(f"aiokafka.protocol.{name}")
        for cls in (c for _, c in inspect.getmembers(mod, inspect.isclass)
                    if issubclass(c, Request) and c is not Request and c.__module__ == mod.__name__):
            lo, hi = apis.get(cls.API_KEY, (1, 0))
            if not any(lo <= s.API_VERSION <= hi for s in cls._CLASSES):
                none.append((cls.__name__, [s.API_VERSION for s in cls._CLASSES], (lo, hi)))
    assert not none, f"aiokafka {aiokafka.__version__} has no version the broker serves for: {none}"
