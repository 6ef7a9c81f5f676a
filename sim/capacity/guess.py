"""A first guess of the pods a pool needs, from the offered load and the step-time model (the search
only starts there; galloping corrects it).

Per pod, a request costs busy time ``prompt / prefill_rate + output × decode_step / S`` (prefill at
full ``max_num_batched_tokens`` chunks, decodes batched ``S = min(max_num_seqs, 64)`` wide) and
holds a sequence slot for about ``prompt / prefill_rate + output × decode_step``. Pods needed ≈ the
larger of arrival rate × busy time and arrival rate × slot time / ``max_num_seqs``, plus 25 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim.cluster.simulation import ReplayItem
from sim.engine.config import EngineConfig
from sim.engine.steptime import StepTimeModel

HEADROOM = 1.25
DECODE_BATCH = 64


def guess_pods(items: Sequence[ReplayItem], engine: EngineConfig) -> int:
    if len(items) < 2:
        return 1
    span = max(items[-1].view.arrival_s - items[0].view.arrival_s, 1e-9)
    rate = len(items) / span
    prompt = sum(i.view.prompt_tokens for i in items) / len(items)
    output = sum(i.output_tokens for i in items) / len(items)
    model = StepTimeModel(engine)
    chunk = engine.max_num_batched_tokens
    seqs = max(1, round(chunk / max(prompt, 1.0)))
    prefill_rate = chunk / (model.base_ms(chunk, seqs, chunk * prompt / 2.0, 0) / 1e3)
    batch = min(engine.max_num_seqs, DECODE_BATCH)
    decode_step = model.base_ms(batch, batch, 0.0, int(batch * (prompt + output / 2.0))) / 1e3
    busy = prompt / prefill_rate + output * decode_step / batch
    slot = prompt / prefill_rate + output * decode_step
    return max(1, math.ceil(HEADROOM * max(rate * busy, rate * slot / engine.max_num_seqs)))
