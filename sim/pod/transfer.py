"""Prefill/decode roles over HTTP: vLLM's ``kv_transfer_params`` (NixlConnector's fields), simulated.

A request whose ``kv_transfer_params`` has ``do_remote_decode: true`` is the prefill half of a disaggregated
request (llm-d's sidecar, or our router, sends it with ``max_tokens: 1``): the pod serves it as usual and its
answer carries the parameters the decode pod needs — ``do_remote_prefill: true``, ``remote_engine_id`` (the
pod's id), ``remote_request_id``, ``remote_block_ids`` (one id per prompt block), ``remote_host`` /
``remote_port`` (the pod's address), ``tp_size``, ``remote_num_tokens`` (the prompt's tokens).

A request with ``do_remote_prefill: true`` (those parameters, passed on) is the decode half: the pod does not
prefill it but queues it for remote KV (:meth:`sim.engine.engine.Engine.add_remote`): once its blocks are free
the prompt's KV crosses the pod's ingress link (tokens not in its own prefix cache × KV bytes per token of its
preset / ``kv_link_gbps`` + ``kv_link_latency_ms``), then it decodes; its first token comes from the step that
recomputes the last prompt token, as in vLLM.

Differences from vLLM: the prefill pod frees its blocks when it answers (vLLM keeps them until the decode pod
has read them or their lease expires), and nothing is really read from the prefill pod (the transfer is timed,
not performed), so a decode pod never fails a transfer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sim.engine.errors import RequestRejected
from sim.engine.kv_transfer import RemoteKV

Role = Literal["prefill", "decode", "both"]
ROLES: tuple[Role, ...] = ("prefill", "decode", "both")
_DECODE_FIELDS = ("remote_engine_id", "remote_block_ids", "remote_host", "remote_port")


class TransferRejected(RequestRejected):
    code = "invalid_request_error"


@dataclass(frozen=True)
class Transfer:
    """What a request's ``kv_transfer_params`` ask of this pod."""

    remote_decode: bool
    """The prefill half: answer with the parameters the decode pod needs."""
    remote_prefill: bool
    """The decode half: the prompt's KV comes from ``remote_engine_id``."""
    tp_size: int = 1


NONE = Transfer(False, False)


def parse_transfer(body: Mapping[str, Any]) -> Transfer:
    """The request's ``kv_transfer_params`` (absent or null: an ordinary request); TransferRejected if malformed."""
    params = body.get("kv_transfer_params")
    if params is None:
        return NONE
    if not isinstance(params, dict):
        raise TransferRejected("'kv_transfer_params' must be an object")
    decode, prefill = bool(params.get("do_remote_decode")), bool(params.get("do_remote_prefill"))
    if decode and prefill:
        raise TransferRejected("kv_transfer_params: do_remote_decode and do_remote_prefill are exclusive")
    if not prefill:
        return Transfer(decode, False)
    missing = [k for k in _DECODE_FIELDS if params.get(k) is None]
    if missing:
        raise TransferRejected(f"kv_transfer_params with do_remote_prefill lacks {missing}")
    tp = params.get("tp_size", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise TransferRejected("kv_transfer_params.tp_size must be an integer >= 1")
    return Transfer(False, True, tp)


def check_role(role: str, transfer: Transfer) -> None:
    """A prefill-role pod does not decode remote KV; a decode-role pod does not prefill for another pod."""
    if transfer.remote_prefill and role == "prefill":
        raise TransferRejected("this pod's role is prefill: it does not take do_remote_prefill requests")
    if transfer.remote_decode and role == "decode":
        raise TransferRejected("this pod's role is decode: it does not take do_remote_decode requests")


def remote_kv(transfer: Transfer, own_tp: int) -> RemoteKV | None:
    """The decode-side state of a ``do_remote_prefill`` request (None for any other)."""
    return RemoteKV(lanes=min(transfer.tp_size, own_tp)) if transfer.remote_prefill else None


def returned_params(pod_id: str, request_id: str, prompt_tokens: int, block_size: int, host: str, port: int,
                    tp: int) -> dict[str, Any]:
    """The ``kv_transfer_params`` a prefill answer carries for the decode pod."""
    blocks = -(-prompt_tokens // block_size)
    return {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": list(range(blocks)),
            "remote_engine_id": pod_id, "remote_request_id": request_id, "remote_host": host, "remote_port": port,
            "tp_size": tp, "remote_num_tokens": prompt_tokens}
