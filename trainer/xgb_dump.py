"""``/model/{ttft,tpot}/xgb/json``: the bare ``get_dump(dump_format="json")`` array, cached per version.

The dump has no base_score; it is published as ``base_score`` in the manifest entry and in
``/model/download/info`` → ``bundle.base_score`` (contract §4 caveat), never inside the array.
"""

from __future__ import annotations

import json
import threading

import xgboost as xgb

from shared.model import LoadedBundle


class TreeDumps:
    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], bytes] = {}
        self._lock = threading.Lock()

    def get(self, loaded: LoadedBundle, name: str) -> bytes:
        key = (loaded.version, name)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        booster = xgb.Booster(model_file=bytearray(loaded.bundle.model_bytes(name)))
        trees = booster.get_dump(dump_format="json")
        body = ("[" + ",".join(tree.strip() for tree in trees) + "]").encode()
        json.loads(body)  # the dump is JSON per tree; fail loudly (500) if XGBoost ever emits otherwise
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if k[0] == loaded.version}
            self._cache[key] = body
        return body
