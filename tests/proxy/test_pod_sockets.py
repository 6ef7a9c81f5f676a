"""The sim pods' sockets: accepted connections must have TCP_NODELAY.

Without it, a client on a keep-alive connection (the proxy's pod pool) delays its ACK of the response
head and Nagle holds the pod's first SSE chunk back ~40 ms (fresh connections are quick-ACKed, so
direct requests did not show it): every proxy overhead figure before 2026-12-01 carried that stall.
The pods serve on the default asyncio loop, which sets TCP_NODELAY only on sockets whose protocol is
IPPROTO_TCP; ``sim.pod.launch.bind`` must create them so.
"""

from __future__ import annotations

import asyncio
import socket

from demo.procs import LOOPBACK
from sim.pod.launch import bind


def test_connections_accepted_on_a_pod_socket_have_tcp_nodelay() -> None:
    async def main() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        listener = bind(LOOPBACK, 0)
        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)  # as uvicorn does
        _, writer = await asyncio.open_connection(LOOPBACK, listener.getsockname()[1])
        nodelay = await asyncio.wait_for(accepted, 10)
        writer.close()
        server.close()
        return nodelay

    assert asyncio.run(main()) == 1
