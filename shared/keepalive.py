"""How long idle keep-alive connections live: every server outlasts every client that talks to it.

A server that closes an idle connection just as a client reuses it fails that request (EOF / reset),
and a client that already sent a POST does not retry it (the llm-d Go client does not). So the idle
timeout of our servers (trainer, predictor, router proxy) is longer than the llm-d Go client's
(``net/http`` ``IdleConnTimeout``: 90 s), and our own clients drop a pooled connection well before the
server they talk to would close it.
"""

from __future__ import annotations

SERVER_KEEPALIVE_S = 120
"""Default idle keep-alive of the trainer, the predictor and the router proxy (s): above the Go client's 90 s."""

CLIENT_MAX_IDLE_S = 60.0
"""Default max idle of our clients of those servers (router → predictor / trainer, predictor → trainer) (s)."""

POD_MAX_IDLE_S = 4.0
"""Default max idle of our clients of model servers (vLLM serves with uvicorn's 5 s keep-alive) (s)."""
