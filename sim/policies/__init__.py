"""Replay policies that plug the router's pipeline and the trainer's fit into the virtual-time loop.

Built into the sim registry (``python -m sim.replay --policy predicted-latency,dual-pool,load-prefix``
needs no extra flag). ``load-prefix`` is the llm-d router's default profile (queue 2, KV 2, prefix 3)
on the router's scheduling engine, without a predictor: the baseline predicted latency must beat.
They use ``router_client``'s public decision core and ``trainer``'s fitting code as libraries; the
product packages never import the simulator. The registry (``sim.cluster.registry``) names them and
imports them lazily, so a plain
``round-robin`` replay does not load XGBoost; this package imports nothing at import time.
"""

