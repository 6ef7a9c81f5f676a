"""Router benchmarks: decision overhead, routing on the replayed trace, the routing matrix, drift."""
