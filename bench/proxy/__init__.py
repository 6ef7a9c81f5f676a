"""Proxy benchmarks: the router proxy's TTFB and CPU overhead, and our HTTP/1 client against aiohttp and httpx."""
