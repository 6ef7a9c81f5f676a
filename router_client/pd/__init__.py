"""Prefill/decode disaggregation in the router: a P/D pool's decode pod, the decider, its prefill pod.

``config`` (the pool's ``pd`` section), ``decider`` (llm-d's prefix-based decider, shared with the simulator's
P/D policies), ``profiles`` (each role's scheduling pipeline per policy), ``metrics`` (Prometheus series and the
``/status`` summary). The two-phase request itself is the proxy's (``router_client/proxy/two_phase.py``).
See ``router_client/README.md``, section "Prefill/decode disaggregation".
"""
