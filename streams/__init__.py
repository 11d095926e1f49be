"""streams: the shared plumbing every layer stands on.

Owns the pipeline spec, topic names, the Avro codec, the Faust app factory, Kafka admin and client
settings, and the pure policies that the data plane and the estimator must run identically (the
batching/drop decision in ``slipstream.streams.batching``, the batch latency model in ``slipstream.streams.latency``).
Imports no other Slipstream layer.
"""
