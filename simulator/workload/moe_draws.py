"""Which router draw each (MoE layer, micro-batch) of a simulated step uses.

Every MoE layer of a workload has the same shape (experts, top-k, tokens per
micro-batch, capacity, balancing), so all its router loads come from one
distribution. A step draws a *pool* of ``K`` independent loads from it in one
batch (:func:`simulator.moe.batch.route_rows`) and gives each (layer,
micro-batch) pair one of them:

* a step with at most ``pool_size(E)`` pairs gives each pair its own draw, in
  (layer, micro-batch) order (Mixtral 8x7B: 32 layers x 32 micro-batches, all
  1,024 distinct);
* a larger step shares: ``K = pool_size(E) = max(MIN_POOL, POOL_ELEMENTS // E)``
  draws, and the pairs take them in a seeded random order, each draw used
  ``floor(pairs / K)`` times or once more (stratified: the mean over the step
  is exactly the pool's mean). DeepSeek-V3 on its shipped plan (59 MoE layers
  incl. MTP x 128 micro-batches, 256 experts): 128 draws, each used 59 times.

Sharing approximates fully independent draws; its error is the pool's sampling
error: the mean cost of a draw is known to ``sd / sqrt(K)``, where ``sd`` is the
spread of one draw's cost (for DeepSeek-V3 a few tenths of a percent of the MoE
part, the slowest of 64 EP ranks). Measured (``python -m
simulator.studies.moe_draws``, reports/moe_draws.md): DeepSeek-V3's step moves
by at most 0.012 % against own draws per pair (seeds move it by 0.004 %). Few
experts make a draw's cost spread wide (Mixtral: seeds move a step by 0.2 %) but
cheap, so such steps get their own draws up to 4,096 pairs. The budget
``POOL_ELEMENTS`` bounds the work per step at about 32k expert counts, whatever
the number of layers and micro-batches.

Uniform routing is deterministic: one draw serves every pair.
Streams: the pool from ``rng_for(seed, POOL_KEY)``, the order of the pairs from
``rng_for(seed, POOL_KEY, 1)`` (:func:`simulator.moe.rng_for`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config.workload import Workload
from ..moe import is_moe_layer, rng_for
from ..moe.batch import LoadRows, route_rows

POOL_ELEMENTS = 1 << 15  # expert counts drawn per step at most (pool size x experts)
MIN_POOL = 64  # draws in a shared pool at the least, however many experts
POOL_KEY = 16  # spawn key of the router-draw streams (any fixed integer)


def pool_size(num_experts: int) -> int:
    """Draws a step shares when it has more (layer, micro-batch) pairs than this."""
    return max(MIN_POOL, POOL_ELEMENTS // max(1, int(num_experts)))


def moe_layers(w: Workload) -> list[int]:
    """0-based ids of the MoE layers, decoder then multi-token-prediction layers."""
    m = w.model
    assert m.moe is not None
    return [i for i in range(m.num_layers + m.mtp_num_layers) if is_moe_layer(m.moe, i)]


@dataclass(frozen=True)
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
    """Draw the pool for ``w`` (``tokens`` routed per micro-batch and layer) and assign it."""
    moe = w.model.moe
    assert moe is not None
    layers = moe_layers(w)
    shape = (len(layers), w.num_microbatches)
    pairs = shape[0] * shape[1]
    rng = rng_for(w.training.seed, POOL_KEY)
    if deterministic:
        k, entry = 1, np.zeros(shape, dtype=np.int64)
    elif pairs <= pool_size(moe.num_experts):
        k, entry = pairs, np.arange(pairs, dtype=np.int64).reshape(shape)
    else:
        k = pool_size(moe.num_experts)
        order = rng_for(w.training.seed, POOL_KEY, 1).permutation(pairs)
        entry = (order % k).reshape(shape)
    rows = route_rows(moe, tokens, rng, k)
    return DrawTable(rows, entry, {layer: i for i, layer in enumerate(layers)})
