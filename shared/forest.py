"""A numpy evaluator for XGBoost tree ensembles: compiled trees (``Trees``) and one folded forest per model.

**Compiling** (``compile_trees``, from the model JSON XGBoost writes — ``save_raw("json")``, or a ``.ubj`` file read by
``shared.ubjson``): each tree is laid out as a complete binary tree of the booster's maximum depth ``D`` (heap
order: children of ``i`` are ``2i+1`` / ``2i+2``); a leaf above depth ``D`` is padded with always-left splits
(threshold +inf) so every row walks exactly ``D`` levels. ``Trees`` is that layout as arrays: the *array form* the
trainer publishes in the bundle (``shared.forest_file``) so predictors need neither XGBoost nor the JSON.

**Evaluating** (``Forest``): a model's location booster (whose output is the quantile booster's base margin) and
its quantile booster are folded into one forest of ``R`` rows — the location trees, then each output's trees
(multi-quantile: one output per tree), each run of trees led by a *slot* row that receives its starting value.
All rows × trees advance one level per vectorised step, so a 100-row call is ``D`` rounds of a few numpy gathers
over an ``R × rows`` array, then one sequential sum per run. Shallow forests (depth ≤ ``MASK_DEPTH``, what the
trainer's ``depth3-monotone`` candidate fits) skip the walk: every node is compared at once and each tree's exit
leaf is read from a table indexed by the leaves those comparisons rule out (``Masks``), about twice as fast.

Semantics follow XGBoost for finite inputs: a row goes left iff ``x < threshold`` compared in float32; the output
is ``base_score + Σ leaf`` summed in tree order in float32 (identity link only), the location's sum standing in
for the quantile booster's base score. Every column is therefore bit-equal to XGBoost's ``inplace_predict``, not
just close. Anything this does not reproduce exactly (categorical splits, classes, vector leaves, DART,
non-identity objectives, very deep trees) raises ``Unsupported``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.errors import BundleError

IDENTITY_OBJECTIVES = frozenset({"reg:squarederror", "reg:quantileerror", "reg:absoluteerror",
                                 "reg:pseudohubererror"})
MAX_DEPTH = 10
MAX_FEATURES = 256
CHUNK_ROWS = 1024
MASK_DEPTH = 3
PROBE_ROWS = 512


class Unsupported(BundleError):
    """The booster uses something the numpy evaluator does not reproduce exactly."""


@dataclass(frozen=True)
class Trees:
    """One booster in the complete-tree layout of depth ``depth`` (``internal`` = 2^depth − 1 slots, ``leaves`` =
    2^depth per tree). Immutable; the arrays are what ``shared.forest_file`` stores."""

    depth: int
    n_features: int
    base_score: np.ndarray  # (outputs,) float32
    feat: np.ndarray  # (trees, internal) uint8 feature index per internal slot (0 on padding)
    thr: np.ndarray  # (trees, internal) float32 threshold (+inf on padding: always left)
    leaf: np.ndarray  # (trees, leaves) float32 leaf value
    output: np.ndarray  # (trees,) int32 output column each tree adds to (XGBoost's tree_info)

    @property
    def n_trees(self) -> int:
        return len(self.output)

    @property
    def n_outputs(self) -> int:
        return len(self.base_score)

    def deepened(self, depth: int) -> Trees:
        """The same trees in the layout of a deeper ``depth`` (padded left, leaves repeated over their span)."""
        if depth == self.depth:
            return self
        internal, old = (1 << depth) - 1, (1 << self.depth) - 1
        feat = np.zeros((self.n_trees, internal), np.uint8)
        thr = np.full((self.n_trees, internal), np.inf, np.float32)
        feat[:, :old], thr[:, :old] = self.feat, self.thr
        leaf = np.repeat(self.leaf, 1 << (depth - self.depth), axis=1)
        return Trees(depth, self.n_features, self.base_score, feat, thr, leaf, self.output)


def check_trees(trees: Trees) -> Trees:
    """``trees`` when its arrays are consistent (shapes, dtypes, indices in range); ``BundleError`` otherwise."""
    d, n = trees.depth, trees.n_trees
    if not 0 <= d <= MAX_DEPTH:
        raise BundleError(f"tree depth {d} outside 0..{MAX_DEPTH}")
    internal, leaves = (1 << d) - 1, 1 << d
    ok = (0 < trees.n_features <= MAX_FEATURES and trees.n_outputs >= 1
          and trees.feat.shape == (n, internal) and trees.thr.shape == (n, internal)
          and trees.leaf.shape == (n, leaves) and trees.output.shape == (n,)
          and trees.feat.dtype == np.uint8 and trees.thr.dtype == np.float32 and trees.leaf.dtype == np.float32
          and trees.base_score.dtype == np.float32 and trees.output.dtype == np.int32)
    if not ok:
        raise BundleError(f"inconsistent tree arrays (depth {d}, {n} trees, {trees.n_features} features)")
    if n and (int(trees.feat.max(initial=0)) >= trees.n_features or not 0 <= int(trees.output.min()) or
              int(trees.output.max()) >= trees.n_outputs):
        raise BundleError("a split names a feature, or a tree an output, beyond the model's")
    if not (np.isfinite(trees.leaf).all() and np.isfinite(trees.base_score).all() and not np.isnan(trees.thr).any()):
        raise BundleError("tree arrays hold non-finite leaves or NaN thresholds")
    return trees


# --- compiling XGBoost's model JSON -----------------------------------------------------------------------------


def _base_score(learner: Mapping[str, Any], outputs: int) -> np.ndarray:
    text = learner["learner_model_param"]["base_score"]
    values = [float(v) for v in str(text).strip("[]").split(",") if v.strip()]
    if len(values) == 1 and outputs > 1:
        values = values * outputs
    if len(values) != outputs:
        raise Unsupported(f"base_score {text!r} does not hold {outputs} value(s)")
    return np.array(values, dtype=np.float32)


def _outputs(learner: Mapping[str, Any]) -> int:
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
    if any(not 0 <= info < outputs for info in _list(booster["model"].get("tree_info", []))):
        raise Unsupported("tree_info names an output beyond num_target")
    if any(int(t.get("tree_param", {}).get("size_leaf_vector", "1")) > 1 for t in booster["model"]["trees"]):
        raise Unsupported("vector-leaf trees (multi_strategy=multi_output_tree)")
    return outputs


def _list(values: Any) -> list[Any]:
    """A JSON list or a numpy array (UBJSON's typed arrays) as a plain list."""
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _depth(left: Sequence[int], right: Sequence[int]) -> int:
    depth, frontier = 0, [0]
    while True:
        nxt = [c for node in frontier for c in (left[node], right[node]) if c != -1]
        if not nxt:
            return depth
        depth, frontier = depth + 1, nxt


def _fill_tree(tree: Mapping[str, Any], depth: int, feat: np.ndarray, thr: np.ndarray, leaf: np.ndarray) -> None:
    """Write one tree into its complete-tree slots (``feat``/``thr`` internal, ``leaf`` bottom row)."""
    if any(t != 0 for t in _list(tree["split_type"])):
        raise Unsupported("categorical split")
    left, right = _list(tree["left_children"]), _list(tree["right_children"])
    index, cond = _list(tree["split_indices"]), _list(tree["split_conditions"])
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
        if not 0 <= index[node] < MAX_FEATURES:
            raise Unsupported(f"split on feature {index[node]} (the layout holds {MAX_FEATURES})")
        feat[slot], thr[slot] = index[node], cond[node]
        stack.append((left[node], 2 * slot + 1, level + 1))
        stack.append((right[node], 2 * slot + 2, level + 1))


def compile_trees(model: Mapping[str, Any]) -> Trees:
    """``Trees`` of an XGBoost model document (``{"learner": ...}``); ``Unsupported`` if it cannot be exact."""
    try:
        return _compile(model["learner"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise Unsupported(f"unexpected model JSON: {type(exc).__name__}: {exc}") from None


def _compile(learner: Mapping[str, Any]) -> Trees:
    outputs = _outputs(learner)
    trees = learner["gradient_booster"]["model"]["trees"]
    info = np.asarray(_list(learner["gradient_booster"]["model"].get("tree_info", [0] * len(trees))), np.int32)
    n_features = int(learner["learner_model_param"]["num_feature"])
    if not 0 < n_features <= MAX_FEATURES:
        raise Unsupported(f"{n_features} features (the layout holds 1 to {MAX_FEATURES})")
    children = [(_list(t["left_children"]), _list(t["right_children"])) for t in trees]
    depth = max((_depth(left, right) for left, right in children), default=0)
    if depth > MAX_DEPTH:
        raise Unsupported(f"tree depth {depth} > {MAX_DEPTH}")
    internal, leaves = (1 << depth) - 1, 1 << depth
    feat = np.zeros((len(trees), internal), dtype=np.uint8)
    thr = np.full((len(trees), internal), np.inf, dtype=np.float32)
    leaf = np.zeros((len(trees), leaves), dtype=np.float32)
    for t, tree in enumerate(trees):
        _fill_tree(tree, depth, feat[t], thr[t], leaf[t])
    if len(info) != len(trees):
        raise Unsupported("tree_info does not list every tree")
    return check_trees(Trees(depth, n_features, _base_score(learner, outputs), feat, thr, leaf, info))


def probe_matrix(trees: Trees, rows: int = PROBE_ROWS, seed: int = 0) -> np.ndarray:
    """Rows whose values sit exactly on, just below and just above the trees' thresholds (for exactness proofs)."""
    rng = np.random.default_rng(seed)
    out = np.zeros((rows, trees.n_features), dtype=np.float32)
    real = np.isfinite(trees.thr)
    for j in range(trees.n_features):
        cuts = trees.thr[real & (trees.feat == j)]
        if cuts.size == 0:
            out[:, j] = rng.uniform(0, 1000, rows).astype(np.float32)
            continue
        picked = rng.choice(cuts, rows)
        nudge = rng.integers(-1, 2, rows)  # below / on / above the threshold
        out[:, j] = np.where(nudge < 0, np.nextafter(picked, np.float32(-np.inf)),
                             np.where(nudge > 0, np.nextafter(picked, np.float32(np.inf)), picked))
    return out


# --- the folded forest ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Forest:
    """The trees of one model folded into one array forest; ``predict(matrix)`` → ``(n, outputs)`` float32 raw
    margins, bit-equal to XGBoost (location booster first, its output the quantile booster's base margin).

    Row ``r`` of the forest is a tree (or a slot: a tree that is never read). Node ids are global: internal slot
    ``l`` of row ``r`` is ``r * internal + l``; leaf ``j`` of row ``r`` is ``rows * internal + r * leaves + j``.
    ``packed[node]`` holds, in one int64, the float32 threshold bits (low word), the feature index (8 bits) and the
    left child id (right = left + 1), so each level costs one table gather, one gather from the input, a compare.
    """

    depth: int
    n_features: int
    packed: np.ndarray  # (rows * internal,) int64: left child << 40 | feature << 32 | threshold bits
    leaf: np.ndarray  # (rows * leaves,) float32
    roots: np.ndarray  # (rows, 1) int64 node id of each row's root
    start: np.ndarray  # (outputs,) float32 base score of each output (unused when there is a location run)
    location: tuple[int, int] | None  # (slot row, end row) of the location run and its base score in ``location_base``
    location_base: float
    runs: tuple[tuple[int, int], ...]  # per output: (slot row, end row) of its trees
    masks: Masks | None = None  # shallow forests: evaluated by ``Masks`` instead of walking ``packed``

    @property
    def n_outputs(self) -> int:
        return len(self.runs)

    def predict(self, matrix: np.ndarray) -> np.ndarray:
        return _chunked(self._eval, self.n_features, matrix)

    def _eval(self, x: np.ndarray, margin: np.ndarray | None = None) -> np.ndarray:
        """``(rows, outputs)``: each output's run summed from ``margin`` (a row's starting value, e.g. a location
        forest's output), else from the folded location's sum or the output's base score."""
        n = x.shape[0]
        if n == 1:  # _sum needs two columns to stay sequential: evaluate the row twice, keep one
            return self._eval(np.repeat(x, 2, axis=0), None if margin is None else np.repeat(margin, 2))[:1]
        values = self.masks.leaves(x) if self.masks is not None else self.leaf.take(self._walk(x) - self.packed.size)
        out = np.empty((n, self.n_outputs), dtype=np.float32)
        if self.location is not None:
            slot, end = self.location
            values[slot] = self.location_base
            margin = _sum(values[slot:end])
        for k, (slot, end) in enumerate(self.runs):
            values[slot] = self.start[k] if margin is None else margin
            out[:, k] = _sum(values[slot:end])
        return out

    def _walk(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[0]
        flat = x.ravel()
        offset = np.arange(n, dtype=np.int64) * self.n_features
        node = np.repeat(self.roots, n, axis=1)
        for _ in range(self.depth):
            word = self.packed.take(node)
            high = word >> 32
            value = flat.take((high & 0xFF) + offset)
            node = (high >> 8) + (value >= word.view(np.float32)[..., 0::2])
        return node


@dataclass(frozen=True)
class Chained:
    """A location forest deeper than its quantile trees, kept apart: the location walks its own depth and its output
    is every quantile run's starting value, so the (usually many, shallow) quantile trees neither walk the
    location's depth nor lose the ``Masks`` path. The same sums in the same order as one folded forest."""

    location: Forest
    main: Forest

    @property
    def n_outputs(self) -> int:
        return self.main.n_outputs

    def predict(self, matrix: np.ndarray) -> np.ndarray:
        return _chunked(self._eval, self.main.n_features, matrix)

    def _eval(self, x: np.ndarray) -> np.ndarray:
        return self.main._eval(x, self.location._eval(x)[:, 0])


def _chunked(evaluate: Callable[[np.ndarray], np.ndarray], n_features: int, matrix: np.ndarray) -> np.ndarray:
    """``evaluate`` on ``matrix`` as float32 rows of ``n_features``, in chunks of ``CHUNK_ROWS`` (bounding the
    rows × trees temporaries: memory, not a speed matter)."""
    x = np.ascontiguousarray(matrix, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != n_features:
        raise BundleError(f"expected (rows, {n_features}) features, got {x.shape}")
    if len(x) > CHUNK_ROWS:
        return np.concatenate([evaluate(x[i:i + CHUNK_ROWS]) for i in range(0, len(x), CHUNK_ROWS)])
    return evaluate(x)


@dataclass(frozen=True)
class Masks:
    """Shallow trees (depth ≤ ``MASK_DEPTH``) evaluated without walking, QuickScorer-style: every node's comparison
    at once (one gather of whole input columns, one compare); a node whose row goes right rules out the leaves of
    its left subtree (its bits in ``cleared``); OR over a tree's nodes, and the exit leaf is the lowest leaf not
    ruled out. ``table[r * 256 + ruled_out]`` is that leaf's value for row ``r``: one gather, no walk."""

    feat: np.ndarray  # (rows * internal,) intp feature of every slot (padding included: it never goes right)
    thr: np.ndarray  # (rows * internal, 1) float32
    cleared: np.ndarray  # (rows * internal, 1) uint8: the left-subtree leaves of each slot, as bits
    table: np.ndarray  # (rows * 256,) float32
    base: np.ndarray  # (rows, 1) int64: r * 256
    internal: int

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """``(rows, n)`` float32: each forest row's leaf value for each input row."""
        right = np.ascontiguousarray(x.T).take(self.feat, axis=0) >= self.thr
        out = (right.view(np.uint8) * self.cleared).reshape(len(self.base), self.internal, -1)
        ruled_out = np.bitwise_or.reduce(out, axis=1)
        return self.table.take(ruled_out + self.base)


def _left_leaves(slot: int, depth: int) -> int:
    """Bits of the leaves under the left child of heap slot ``slot`` (leaf ``j`` = bit ``j``)."""
    level = (slot + 1).bit_length() - 1
    first = slot
    for _ in range(depth - level):
        first = 2 * first + 1
    start, span = first - ((1 << depth) - 1), 1 << (depth - level)
    return ((1 << (span // 2)) - 1) << start


def _masks(feat: np.ndarray, thr: np.ndarray, leaf: np.ndarray, rows: int, depth: int) -> Masks:
    internal, leaves = (1 << depth) - 1, 1 << depth
    cleared = np.array([_left_leaves(s, depth) for s in range(internal)], dtype=np.uint8)
    lowest_kept = np.array([((~v) & (v + 1)).bit_length() - 1 for v in range(256)], dtype=np.int64)
    lowest_kept = np.minimum(lowest_kept, leaves - 1)  # patterns no row can produce: any valid leaf
    table = leaf.reshape(rows, leaves)[:, lowest_kept].ravel()
    return Masks(feat.astype(np.intp), thr.reshape(-1, 1), np.tile(cleared, rows).reshape(-1, 1),
                 np.ascontiguousarray(table, dtype=np.float32), (np.arange(rows, dtype=np.int64) * 256).reshape(-1, 1),
                 internal)


def _sum(run: np.ndarray) -> np.ndarray:
    """Column sums of ``run`` (trees × rows, ≥ 2 columns) added tree after tree in float32, XGBoost's order.
    ``np.add.reduce`` over axis 0 of a C-contiguous array with several columns adds row after row (an outer loop);
    with one column that axis becomes the inner loop and numpy sums it pairwise, hence ``_eval``'s two rows."""
    return np.add.reduce(run, axis=0)


def _slot(depth: int, n_features: int) -> Trees:
    """One never-read tree: its leaf is overwritten with a run's starting value."""
    internal = (1 << depth) - 1
    return Trees(depth, n_features, np.zeros(1, np.float32), np.zeros((1, internal), np.uint8),
                 np.full((1, internal), np.inf, np.float32), np.zeros((1, 1 << depth), np.float32),
                 np.zeros(1, np.int32))


def fold(main: Trees, location: Trees | None = None) -> Forest | Chained:
    """One evaluator for a model: ``location`` (single output) whose sum is ``main``'s base margin, or ``main``
    alone from its own base score. A location deeper than ``main`` is kept apart (``Chained``): on a trained bundle
    (TTFT 1 + 102 trees, TPOT 35 + 216, locations of depth 6 and quantile trees of depth 3) one folded forest walked
    every tree six levels."""
    if sys.byteorder != "little":
        raise Unsupported("the packed layout assumes a little-endian machine")
    if location is not None and (location.n_outputs != 1 or location.n_features != main.n_features):
        raise BundleError("a location booster must have one output and the model's features")
    if location is not None and location.depth > main.depth >= 1:
        return Chained(_folded(location, None), _folded(main, None))
    return _folded(main, location)


def _folded(main: Trees, location: Trees | None) -> Forest:
    depth = max(main.depth, location.depth if location is not None else 0)
    parts: list[Trees] = []
    location_run = None
    if location is not None:
        parts += [_slot(depth, main.n_features), location.deepened(depth)]
        location_run = (0, 1 + location.n_trees)
    deep = main.deepened(depth)
    runs = []
    for k in range(main.n_outputs):
        first = sum(p.n_trees for p in parts)
        mine = np.flatnonzero(deep.output == k)  # tree order kept within each output
        parts += [_slot(depth, main.n_features),
                  Trees(depth, main.n_features, deep.base_score, deep.feat[mine], deep.thr[mine], deep.leaf[mine],
                        deep.output[mine])]
        runs.append((first, first + 1 + len(mine)))
    feat = np.concatenate([p.feat for p in parts]).ravel()
    thr = np.concatenate([p.thr for p in parts]).ravel()
    leaf = np.concatenate([p.leaf for p in parts]).ravel()
    rows = sum(p.n_trees for p in parts)
    internal = (1 << depth) - 1
    roots = (np.arange(rows, dtype=np.int64) * internal if depth else
             np.arange(rows, dtype=np.int64)).reshape(-1, 1)
    masks = _masks(feat, thr, leaf, rows, depth) if 1 <= depth <= MASK_DEPTH else None
    return Forest(depth, main.n_features, _pack(feat, thr, rows, depth), leaf, roots, main.base_score.copy(),
                  location_run, float(location.base_score[0]) if location is not None else 0.0, tuple(runs), masks)


def _pack(feat: np.ndarray, thr: np.ndarray, rows: int, depth: int) -> np.ndarray:
    internal, leaves = (1 << depth) - 1, 1 << depth
    slot = np.arange(rows * internal, dtype=np.int64)
    tree, local = slot // max(internal, 1), slot % max(internal, 1)
    child = 2 * local + 1
    left = np.where(child < internal, tree * internal + child, rows * internal + tree * leaves + (child - internal))
    return (left << 40) | (feat.astype(np.int64) << 32) | thr.view(np.uint32).astype(np.int64)
