"""Prefill/decode (P/D) replay policies: a decode pod, a decider, and a prefill pod per request.

``pd-round-robin`` and ``pd-load-prefix`` (llm-d's P/D profile) need no models; ``pd-predicted-latency`` and
``pd-predicted-latency-slo`` run the router's decision core per role on in-process retrained models.
Built into the registry (``sim.cluster.registry``), imported on first use; see ``sim/README.md``.
"""
