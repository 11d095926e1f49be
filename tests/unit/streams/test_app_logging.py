"""A faust worker leaves the root logger at the requested level: faust's own worker sets it to DEBUG
for its terminal spinner, so every library's ``log.debug`` (aiokafka logs each produced record) built
a LogRecord on the data path."""
from __future__ import annotations

import asyncio
import logging

import faust
import pytest

from slipstream.streams.app import AppSettings, make_app
from slipstream.streams.config import KafkaSettings


def debug_enabled_after_setup(worker_class) -> bool:
    app = make_app(AppSettings("quiet-test", KafkaSettings()))
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    loop = asyncio.new_event_loop()
    try:
        worker = (worker_class or app.conf.Worker)(app, loglevel="warn", loop=loop, redirect_stdouts=False)
        worker._setup_logging()
        # a logger nobody configures (aiokafka's own may have been set by another test, e.g. by
        # slipstream.streams.broker's probe): what every library's logger inherits from the root
        return logging.getLogger("slipstream-test.any-library").isEnabledFor(logging.DEBUG)
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
        loop.close()


def test_the_apps_worker_keeps_the_requested_level():
    assert not debug_enabled_after_setup(None)


@pytest.mark.parametrize("worker_class", [faust.Worker])
def test_fausts_own_worker_would_log_every_debug_call(worker_class):
    assert debug_enabled_after_setup(worker_class)  # the trap this guards against
