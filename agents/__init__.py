"""agents: the data plane. One Faust agent per pipeline stage: deadline-aware batching (the policy in
``slipstream.streams.batching``), executors and the model zoo, routing to the children's topics, the join of
fan-out fragments, hot reconfiguration from the control topic, dead letters and metrics.
Imports ``streams`` and ``schemas`` only; nothing in the control plane imports it."""
