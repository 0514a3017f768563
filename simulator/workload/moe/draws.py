"""Which router draw each (MoE layer, micro-batch) of a simulated step uses.

Every MoE layer of a workload has the same shape (experts, top-k, tokens per
micro-batch, capacity, balancing), so all its router loads come from one
distribution. A step draws its loads in one batch
(:func:`simulator.moe.batch.route_rows`) and gives each (layer, micro-batch)
pair one of them:

* by default each pair gets its own draw, in (layer, micro-batch) order
  (Mixtral 8x7B: 32 layers x 32 micro-batches, 1,024 draws);
* pairs *share* a pool of ``K`` draws where the draws are exchangeable samples
  of one distribution whose only spread is sampling noise: every draw selects
  experts with the same probabilities (DeepSeek-V3's bias balancing in steady
  state; a router with zero skew). An expert's count then has relative standard
  deviation ``cv = sqrt((1 - 1/E) * E / (T * k))`` (multinomial, ``T`` tokens
  routed, top-``k``, ``E`` experts), and the pool's mean count is known to
  ``cv / sqrt(K)``. ``K = max(MIN_POOL, (cv / NOISE_TOL)^2)``, and the pairs
  take the draws in a seeded random order, each used ``floor(pairs / K)``
  times or once more (stratified: the step's mean is exactly the pool's).
  DeepSeek-V3 on its shipped plan (131,072 tokens, top-8 of 256: ``cv`` 1.6 %;
  59 MoE layers incl. MTP x 128 micro-batches): 64 draws, each used 118 times.

Why not share draws whose popularity differs per draw (a skewed router with the
auxiliary loss, recorded layers): their cost spreads widely (Mixtral: a new seed
moves a step by 0.2 %), and a shared pool reuses a heavy draw within a stage;
measured on Mixtral 8x22B, sharing 2,048 draws among 3,584 pairs moved the step
by up to 0.4 %. Such draws have few experts and are cheap, so they are never
shared. For DeepSeek-V3 sharing moves the step by about 0.01 % against own
draws per pair (``python -m simulator.studies.moe_draws``, reports/moe_draws.md).

Uniform routing is deterministic: one draw serves every pair.
Streams: the draws from ``rng_for(seed, POOL_KEY)``, the order of the pairs from
``rng_for(seed, POOL_KEY, 1)`` (:func:`simulator.moe.rng_for`).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...config.workload import MoEConfig, Workload
from ...moe import effective_skew, is_moe_layer, rng_for
from ...moe.batch import LoadRows, route_rows

NOISE_TOL = 0.002  # a shared pool's mean count per expert to 0.2 % (relative sd)
MIN_POOL = 64  # draws in a shared pool at the least
POOL_KEY = 16  # spawn key of the router-draw streams (any fixed integer)


def same_selection(moe: MoEConfig) -> bool:
    """Whether every draw selects experts with the same probabilities (steady state)."""
    return moe.router_load == "skewed" and (moe.balancing == "aux_free_bias"
                                            or effective_skew(moe) == 0.0)


def pool_size(moe: MoEConfig, tokens: int, pairs: int) -> int:
    """How many draws ``pairs`` (layer, micro-batch) pairs of ``tokens`` tokens each use
    (``pairs``: every pair its own draw; fewer: a shared pool, module docs)."""
    if not same_selection(moe):
        return pairs
    e = moe.num_experts
    cv2 = (1.0 - 1.0 / e) * e / max(1, tokens * moe.router_topk)
    return min(pairs, max(MIN_POOL, math.ceil(cv2 / NOISE_TOL**2)))


def moe_layers(w: Workload) -> list[int]:
    """0-based ids of the MoE layers, decoder then multi-token-prediction layers."""
    m = w.model
    assert m.moe is not None
    return [i for i in range(m.num_layers + m.mtp_num_layers) if is_moe_layer(m.moe, i)]


@dataclass(frozen=True, eq=False)  # numpy fields: no value equality or hash
class DrawTable:
    """The pool of draws and, per (MoE layer, micro-batch), the pool row it uses."""

    rows: LoadRows  # the pool: K draws
    entry: np.ndarray  # int [layers, micro-batches] -> row of ``rows``
    layer_row: dict[int, int]  # MoE layer id -> row of ``entry``

    def index(self, layer: int, mb: int) -> int:
        """Pool row of ``layer`` for micro-batch ``mb``."""
        if len(self.rows) == 1:  # one draw serves every pair (uniform routing)
            return 0
        if layer not in self.layer_row:
            raise ValueError(f"layer {layer} is not an MoE layer of this workload "
                             f"(MoE layers: {sorted(self.layer_row)})")
        return int(self.entry[self.layer_row[layer], mb])

    def uses(self) -> np.ndarray:
        """How many (layer, micro-batch) pairs use each pool row, int ``[K]``."""
        return np.bincount(self.entry.ravel(), minlength=len(self.rows))


def draw_table(w: Workload, tokens: int, deterministic: bool) -> DrawTable:
    """Draw the pool for ``w`` (``tokens`` routed per micro-batch and layer) and assign it.

    The table is a function of its key alone: the root seed and stream key, the MoE block
    (router, balancing, capacity, layer pattern, trace path), the MoE layers, the
    micro-batches, the tokens and the pool size (the draws come from generators
    seeded by ``training.seed``), so tables are kept (read-only) and handed out again
    for an equal key: a plan search costs thousands of plans that differ only in ways
    the draws do not see (Mixtral 8x7B on 64 GPUs: 5,293 plans, 60 keys).
    """
    layers, k = _pool(w, tokens, deterministic)
    key = (w.training.seed, POOL_KEY, w.model.moe.model_dump_json(), layers,
           w.num_microbatches, int(tokens), bool(deterministic), k)
    table = _TABLES.get(key)
    if table is None:
        table = _new_table(w, tokens, layers, k)
        _TABLES.put(key, table, table_bytes(table))
    return table


def _pool(w: Workload, tokens: int, deterministic: bool) -> tuple[tuple[int, ...], int]:
    """The MoE layers and the pool size (1 when deterministic; it reads :data:`MIN_POOL`
    and :data:`NOISE_TOL`, so a study that changes them keys its own tables)."""
    moe = w.model.moe
    assert moe is not None
    layers = tuple(moe_layers(w))
    pairs = len(layers) * w.num_microbatches
    return layers, 1 if deterministic else pool_size(moe, tokens, pairs)


def _new_table(w: Workload, tokens: int, layers: tuple[int, ...], k: int) -> DrawTable:
    """The table of the MoE ``layers`` with a pool of ``k`` draws (1: deterministic)."""
    moe = w.model.moe
    assert moe is not None
    shape = (len(layers), w.num_microbatches)
    pairs = shape[0] * shape[1]
    rng = rng_for(w.training.seed, POOL_KEY)
    if k == 1:
        entry = np.zeros(shape, dtype=np.int64)
    elif k == pairs:
        entry = np.arange(pairs, dtype=np.int64).reshape(shape)
    else:
        order = rng_for(w.training.seed, POOL_KEY, 1).permutation(pairs)
        entry = (order % k).reshape(shape)
    rows = route_rows(moe, tokens, rng, k)
    for a in (entry, rows.expert_tokens, rows.kept_tokens, rows.dropped, rows.balance_loss):
        a.flags.writeable = False  # shared by every plan with the same key
    return DrawTable(rows, entry, {layer: i for i, layer in enumerate(layers)})


class ByteLRU:
    """Values by key, the least recently used dropped past ``budget`` bytes (one
    process's share: a sweep worker keeps its own). The newest value always stays."""

    def __init__(self, budget: int):
        self.budget, self.used = budget, 0
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()

    def get(self, key: Any) -> Any:
        hit = self._items.get(key)
        if hit is None:
            return None
        self._items.move_to_end(key)
        return hit[0]

    def put(self, key: Any, value: Any, size: int) -> None:
        old = self._items.pop(key, None)
        self.used += size - (old[1] if old else 0)
        self._items[key] = (value, size)
        while self.used > self.budget and len(self._items) > 1:
            _, (_, dropped) = self._items.popitem(last=False)
            self.used -= dropped

    def clear(self) -> None:
        self._items.clear()
        self.used = 0


def table_bytes(table: DrawTable) -> int:
    """Bytes of a table's arrays."""
    r = table.rows
    return sum(a.nbytes for a in (table.entry, r.expert_tokens, r.kept_tokens, r.dropped,
                                  r.balance_loss))


CACHE_BYTES = 128 << 20  # draw tables kept per process (Mixtral 8x7B's largest: ~1 MB)
_TABLES = ByteLRU(CACHE_BYTES)


def clear_draw_tables() -> None:
    """Forget the drawn tables kept in this process (and the volumes kept per table)."""
    _TABLES.clear()
