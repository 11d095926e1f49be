"""slipstream: the command line. It wires the layers together and is the only package that imports
the data plane (``agents``) alongside the control plane (``planner``, ``tuner``) and ``loadgen``."""
