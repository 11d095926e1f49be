"""tuner: the fast half of the control plane. Owns traffic envelopes from arrival timestamps, the
scaling policy (pure functions), and the actuators that change replicas (local worker processes,
Kubernetes) and partitions. Talks to the data plane only through topics and process management."""
