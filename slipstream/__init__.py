"""Slipstream: multi-model ML inference pipelines over Kafka inside a tail-latency SLO.

This module is the public API; everything else is importable under ``slipstream.*`` and may change.

    import slipstream

    pipe = slipstream.load_pipeline("pipeline.yaml")
    async with slipstream.PipelineClient(pipe, slipstream.KafkaSettings.from_env()) as c:
        result = await c.result(await c.submit(payload, content_type="image/png"), timeout_s=5)
        result.status, result.output  # an InferenceResult (slipstream.schemas.records)

The layers, each a subpackage installed from the repository's top-level folder of the same name:
``schemas`` (the Avro records) < ``streams`` (Kafka, codec, spec, shared policies) < ``agents`` (the
stage workers), ``planner``, ``tuner`` and ``gateway``, which talk only through ``schemas`` records on
Kafka; ``loadgen`` is the measurement lab; ``cli`` and ``commands`` are the command line on top of
everything. Names here are loaded on first use, so ``import slipstream`` costs nothing.
"""
from __future__ import annotations

import importlib
from typing import Any

# public name -> the module that defines it
_EXPORTS = {
    # submitting requests and awaiting results
    "PipelineClient": "slipstream.streams.client",
    "SyncClient": "slipstream.streams.client",
    "make_request": "slipstream.streams.client",
    "KafkaSettings": "slipstream.streams.config",
    "RecordTooLarge": "slipstream.streams.limits",
    # the same through the gateway's Open Inference Protocol
    "GatewayClient": "slipstream.gateway.client",
    "GatewayError": "slipstream.gateway.client",
    "Shed": "slipstream.gateway.client",
    # pipeline specs
    "load_pipeline": "slipstream.streams.spec",
    "parse_pipeline": "slipstream.streams.spec",
    "Pipeline": "slipstream.streams.spec",
    "SpecError": "slipstream.streams.spec",
    # the records on the wire: their names, and their codec
    "RECORD_NAMES": "slipstream.schemas",
    "encode": "slipstream.streams.codec",
    "decode": "slipstream.streams.codec",
    "CodecError": "slipstream.streams.codec",
}
_RENAMED = {"RECORD_NAMES": "NAMES"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'slipstream' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
