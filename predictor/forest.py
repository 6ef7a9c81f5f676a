"""A numpy evaluator for XGBoost tree ensembles, compiled from the booster's own JSON model.

Each tree is laid out as a complete binary tree of the forest's maximum depth ``D`` (heap
order: children of ``i`` are ``2i+1`` / ``2i+2``); a leaf above depth ``D`` is padded with
always-left splits (threshold +inf) so every row walks exactly ``D`` levels. All trees and
rows advance one level per vectorised step, so a 100-row call is ``D`` rounds of a few numpy
gathers over a ``rows × trees`` array instead of a native call with fixed overhead.

Semantics follow XGBoost for finite inputs: a row goes left iff ``x < threshold`` compared in
float32; the prediction is ``base_score + Σ leaf`` (identity link only). Several outputs (XGBoost
multi-quantile or multi-target, one output per tree) are summed per output in tree order, each
from its own base score, so every column is bit-equal too. Anything this does not reproduce
exactly (categorical splits, classes, vector leaves, DART, non-identity objectives, very deep
trees) raises ``Unsupported`` and the caller keeps XGBoost.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import xgboost as xgb

from shared.bundle import parse_base_score
from shared.errors import BundleError

IDENTITY_OBJECTIVES = frozenset({"reg:squarederror", "reg:quantileerror", "reg:absoluteerror",
                                 "reg:pseudohubererror"})
MAX_DEPTH = 10
CHUNK_ROWS = 1024


class Unsupported(BundleError):
    """The booster uses something the numpy evaluator does not reproduce exactly."""


def _base_score(learner: dict[str, Any], outputs: int) -> np.ndarray:
    text = learner["learner_model_param"]["base_score"]
    values = parse_base_score(text)
    if len(values) == 1 and outputs > 1:
        values = values * outputs
    if len(values) != outputs:
        raise Unsupported(f"base_score {text!r} does not hold {outputs} value(s)")
    return np.array(values, dtype=np.float32)


def _outputs(learner: dict[str, Any]) -> int:
    """Number of output columns (one per target); raises ``Unsupported`` for what is not summed per tree."""
    params = learner["learner_model_param"]
    outputs = max(1, int(params.get("num_target", "1")))
    if int(params.get("num_class", "0")) > 1:
        raise Unsupported("multi-class model")
    if learner["objective"]["name"] not in IDENTITY_OBJECTIVES:
        raise Unsupported(f"objective {learner['objective']['name']!r} has a non-identity link")
    booster = learner["gradient_booster"]
    if booster.get("name") != "gbtree":
        raise Unsupported(f"booster {booster.get('name')!r} is not gbtree")
    if any(not 0 <= info < outputs for info in booster["model"].get("tree_info", [])):
        raise Unsupported("tree_info names an output beyond num_target")
    if any(int(t.get("tree_param", {}).get("size_leaf_vector", "1")) > 1 for t in booster["model"]["trees"]):
        raise Unsupported("vector-leaf trees (multi_strategy=multi_output_tree)")
    return outputs


def _depth(tree: dict[str, Any]) -> int:
    left, right = tree["left_children"], tree["right_children"]
    depth, frontier = 0, [0]
    while True:
        nxt = [c for node in frontier for c in (left[node], right[node]) if c != -1]
        if not nxt:
            return depth
        depth, frontier = depth + 1, nxt


def _fill_tree(tree: dict[str, Any], depth: int, feat: np.ndarray, thr: np.ndarray, leaf: np.ndarray) -> None:
    """Write one tree into its complete-tree slots (``feat``/``thr`` internal, ``leaf`` bottom row)."""
    if any(t != 0 for t in tree["split_type"]):
        raise Unsupported("categorical split")
    left, right = tree["left_children"], tree["right_children"]
    index, cond = tree["split_indices"], tree["split_conditions"]
    internal = (1 << depth) - 1
    stack = [(0, 0, 0)]  # (xgboost node id, heap slot, level)
    while stack:
        node, slot, level = stack.pop()
        if left[node] == -1:
            first = slot
            for _ in range(depth - level):  # pad: always go left down to the bottom row
                feat[first], thr[first] = 0, np.inf
                first = 2 * first + 1
            span = 1 << (depth - level)
            start = first - internal
            leaf[start:start + span] = cond[node]
            continue
        feat[slot], thr[slot] = index[node], cond[node]
        stack.append((left[node], 2 * slot + 1, level + 1))
        stack.append((right[node], 2 * slot + 2, level + 1))


@dataclass(frozen=True)
class Forest:
    """An immutable compiled forest; ``predict(matrix)`` is bit-equal to ``booster.inplace_predict``.

    Node ids are global: internal slot ``l`` of tree ``t`` is ``t * internal + l``; leaf ``j`` of
    tree ``t`` is ``trees * internal + t * leaves + j``. ``packed[node]`` holds, in one int64, the
    float32 threshold bits (low word), the feature index (8 bits) and the left child id (right =
    left + 1), so each level costs one table gather, one gather from the input and a compare.
    """

    depth: int
    n_trees: int
    n_features: int
    base_score: np.ndarray  # (outputs,) float32
    feat: np.ndarray  # (trees * internal,) int32 feature index per internal slot
    thr: np.ndarray  # (trees * internal,) float32 threshold (+inf on padding: always left)
    leaf: np.ndarray  # (trees * leaves,) float32 leaf value
    packed: np.ndarray  # (trees * internal,) int64: left child << 40 | feature << 32 | threshold bits
    roots: np.ndarray  # (trees,) int64 node id of each root
    order: np.ndarray  # (trees,) tree indices grouped by output, tree order kept within each output
    starts: np.ndarray  # (outputs + 1,) where each output's trees begin in ``order``

    @property
    def n_outputs(self) -> int:
        return len(self.base_score)

    def predict(self, matrix: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
        """Raw margins (float32, bit-equal to XGBoost) of a float32 ``(n, n_features)`` matrix: ``(n,)``
        for a single-output forest, ``(n, outputs)`` otherwise. ``base`` (``(n, outputs)``) replaces the
        base score per row, as XGBoost's ``base_margin`` does."""
        x = np.ascontiguousarray(matrix, dtype=np.float32)
        n = x.shape[0]
        start = (np.tile(self.base_score, (n, 1)) if base is None
                 else np.asarray(base, dtype=np.float32).reshape(n, self.n_outputs))
        if not self.n_trees:
            return start[:, 0].copy() if self.n_outputs == 1 else start.copy()
        if n > CHUNK_ROWS:  # bound the rows × trees temporaries (memory), not a speed matter
            return np.concatenate([self._walk(x[i:i + CHUNK_ROWS], start[i:i + CHUNK_ROWS])
                                   for i in range(0, n, CHUNK_ROWS)])
        return self._walk(x, start)

    def _walk(self, x: np.ndarray, start: np.ndarray) -> np.ndarray:
        n = x.shape[0]
        flat = x.ravel()
        rows = (np.arange(n, dtype=np.int64) * self.n_features)[:, None]
        node = np.broadcast_to(self.roots, (n, self.n_trees))
        for _ in range(self.depth):
            word = self.packed.take(node)
            high = word >> 32
            value = flat.take((high & 0xFF) + rows)
            node = (high >> 8) + (value >= word.view(np.float32)[..., 0::2])
        leaves = self.leaf.take(node - self.packed.size)
        if self.n_outputs == 1:
            leaves[:, 0] += start[:, 0]  # XGBoost's order: base, then each tree, in float32
            return leaves.cumsum(axis=1)[:, -1]
        grouped = leaves[:, self.order]
        out = np.empty((n, self.n_outputs), dtype=np.float32)
        for k in range(self.n_outputs):
            part = grouped[:, self.starts[k]:self.starts[k + 1]]
            if part.shape[1] == 0:
                out[:, k] = start[:, k]
                continue
            part[:, 0] += start[:, k]
            out[:, k] = part.cumsum(axis=1)[:, -1]
        return out


def _pack(feat: np.ndarray, thr: np.ndarray, n_trees: int, depth: int) -> np.ndarray:
    internal, leaves = (1 << depth) - 1, 1 << depth
    slot = np.arange(n_trees * internal, dtype=np.int64)
    tree, local = slot // internal, slot % internal
    child = 2 * local + 1
    left = np.where(child < internal, tree * internal + child,
                    n_trees * internal + tree * leaves + (child - internal))
    return (left << 40) | (feat.astype(np.int64) << 32) | thr.view(np.uint32).astype(np.int64)


def compile_forest(booster: xgb.Booster) -> Forest:
    """Compile ``booster`` into a ``Forest``; raise ``Unsupported`` if it cannot be exact."""
    try:
        return _compile(booster)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise Unsupported(f"unexpected model JSON: {type(exc).__name__}: {exc}") from None


def _compile(booster: xgb.Booster) -> Forest:
    learner = orjson.loads(bytes(booster.save_raw("json")))["learner"]
    outputs = _outputs(learner)
    trees = learner["gradient_booster"]["model"]["trees"]
    info = np.asarray(learner["gradient_booster"]["model"].get("tree_info", [0] * len(trees)), dtype=np.int64)
    n_features = int(learner["learner_model_param"]["num_feature"])
    depth = max((_depth(t) for t in trees), default=0)
    if depth > MAX_DEPTH:
        raise Unsupported(f"tree depth {depth} > {MAX_DEPTH}")
    internal, leaves = (1 << depth) - 1, 1 << depth
    n = len(trees)
    feat = np.zeros(n * internal, dtype=np.int32)
    thr = np.full(n * internal, np.inf, dtype=np.float32)
    leaf = np.zeros(n * leaves, dtype=np.float32)
    for t, tree in enumerate(trees):
        _fill_tree(tree, depth, feat[t * internal:(t + 1) * internal], thr[t * internal:(t + 1) * internal],
                   leaf[t * leaves:(t + 1) * leaves])
    if n and int(feat.max(initial=0)) >= n_features:
        raise BundleError("split on a feature index beyond the model's features")
    if sys.byteorder != "little":
        raise Unsupported("the packed layout assumes a little-endian machine")
    if n_features > 0xFF:
        raise Unsupported(f"{n_features} features (the packed layout holds 256)")
    order = np.argsort(info, kind="stable")
    starts = np.searchsorted(info[order], np.arange(outputs + 1))
    return Forest(depth, n, n_features, _base_score(learner, outputs), feat, thr, leaf, _pack(feat, thr, n, depth),
                  np.arange(n, dtype=np.int64) * (internal if depth else 1), order, starts)
