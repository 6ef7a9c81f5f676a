"""vLLM-faithful pod simulator and virtual-time cluster replay.

Sub-packages:

- :mod:`sim.engine` -- the per-pod engine model (scheduler, KV blocks, prefix cache, step time).
- :mod:`sim.workload` -- trace loading and the synthetic session/prefix model.
- :mod:`sim.cluster` -- routing-policy contract, built-in policies, the discrete-event cluster.
- :mod:`sim.replay` -- ``python -m sim.replay``: replay a trace in virtual time.
- :mod:`sim.pod` -- ``python -m sim.pod``: OpenAI-compatible simulated vLLM pods over HTTP.

The simulator never imports ``trainer``, ``predictor`` or ``router_client``.
"""
