"""OpenAI-compatible routing proxy (``python -m router_client``) built on the router_client facade.

Modules: ``parsing`` (body + headers → RequestInfo), ``forwarding`` (decide → forward → report),
``relay`` (SSE pass-through), ``sse`` (framing), ``models`` (``/v1/models``), ``metrics``,
``errors`` + ``http_errors`` (the one error → HTTP mapping), ``app`` (routes and lifespan).
"""
