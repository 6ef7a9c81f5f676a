"""``python -m bench.real_engine``: routing policies replayed through the router proxy onto real vLLM engines."""
