"""Prefill/decode (P/D) routing benchmark: the P/D variants against pd-load-prefix, their targets, table and plot."""
