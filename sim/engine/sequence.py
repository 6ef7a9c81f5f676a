"""Per-request engine state."""

from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import Any

FIRST_TOKEN = 0
FINISHED = 1


class Sequence:
    """One request inside an engine. Times are engine-clock seconds.

    ``num_computed`` counts tokens whose KV is in the cache; the sequence's current length is
    ``prompt_len + num_output``. A step that brings ``num_computed`` up to the length samples one
    token, so prefill completion emits the first token and every later step one more.
    """

    __slots__ = (
        "request_id", "prompt_len", "output_len", "block_hashes", "arrival", "payload",
        "num_computed", "num_output", "hashed", "n_plain", "registered", "first_token_time",
        "finish_time", "preemptions", "hit_tokens", "first_hit_tokens", "admitted", "finished", "remote",
    )

    def __init__(
        self,
        request_id: str,
        prompt_len: int,
        output_len: int,
        block_hashes: Seq[int] = (),
        payload: Any = None,
    ) -> None:
        if prompt_len < 1 or output_len < 1:
            raise ValueError("prompt_len and output_len must be >= 1")
        self.request_id = request_id
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.block_hashes = block_hashes
        self.payload = payload
        self.arrival = 0.0
        self.num_computed = 0
        self.num_output = 0
        self.hashed: list[int] = []
        self.n_plain = 0
        self.registered = 0
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.preemptions = 0
        self.hit_tokens = 0
        self.first_hit_tokens: int | None = None
        self.admitted = False
        self.finished = False
        self.remote: Any = None
        """Disaggregated request: its prompt KV comes from a prefill pod (:class:`sim.engine.kv_transfer.RemoteKV`)
        until the scheduler admits it; None for a request this engine prefills itself."""

    @property
    def length(self) -> int:
        return self.prompt_len + self.num_output

    @property
    def num_blocks(self) -> int:
        return len(self.hashed) + self.n_plain

    @property
    def prefix_hit_fraction(self) -> float:
        """Share of the prompt served from the prefix cache at first admission."""
        return (self.first_hit_tokens or 0) / self.prompt_len

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival

    @property
    def avg_tpot(self) -> float:
        """(e2e - ttft) / (tokens - 1), 0 for a single token."""
        if self.finish_time is None or self.first_token_time is None or self.num_output <= 1:
            return 0.0
        return (self.finish_time - self.first_token_time) / (self.num_output - 1)


Event = tuple[float, int, Sequence]
"""``(time, FIRST_TOKEN | FINISHED, sequence)`` emitted by :meth:`Engine.advance_until`."""
