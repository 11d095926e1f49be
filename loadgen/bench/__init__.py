"""The benchmarks behind ``slipstream bench``: the data plane against a plain Kafka relay, the ONNX
executor, worker memory, the planner's solve and estimator speed, the tuner's envelope and activation
cost, scale events, the gateway, and the bytes read per arrival. Each prints raw figures and a ratio
to a baseline measured in the same run; none is part of the product."""
