"""Router draws in batch: many independent load vectors in one numpy pass.

A simulated step needs one router draw per MoE layer and micro-batch
(DeepSeek-V3 on its shipped plan: 59 layers x 128 micro-batches). Drawing them
one call at a time costs a generator, a root solve and a multinomial per draw;
:func:`route_rows` draws ``n`` of them at once on ``[n, num_experts]`` arrays,
with the same model as :func:`simulator.moe.route` (uniform / skewed / trace,
balancing, capacity, Switch balance loss).

Stream layout (one generator for the whole batch): the ``n`` logit vectors
first (``rng.standard_normal((n, E))``, row ``i`` is draw ``i``), then the
top-k counts of rows ``0, 1, ...`` in order. :func:`topk_counts_rows`
consumes the generator exactly as ``n`` successive
:func:`~simulator.moe.sampling.topk_counts` calls do and returns the same
numbers (the per-row function is the reference; ``tests/test_moe_batch.py``
checks they agree), so batching changes speed, not the sampled loads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config.workload import MoEConfig
from .capacity import capacity
from .router import RouterLoads, bias_residual, effective_skew
from .sampling import (
    CHUNK_ELEMENTS,
    EXACT_LIMIT,
    _threshold_counts,
    largest_remainder,
    softmax,
    topk_counts,
    uniform_counts,
)
from .trace import load_trace

NEWTON_ITERATIONS = 30  # as sampling.inclusion_probs


@dataclass(frozen=True, eq=False)  # numpy fields: no value equality or hash
class LoadRows:
    """``n`` router draws of one MoE layer shape: row ``i`` is one :class:`RouterLoads`."""

    expert_tokens: np.ndarray  # int64 [n, E], received before capacity drop
    kept_tokens: np.ndarray  # int64 [n, E], after capacity drop
    dropped: np.ndarray  # int64 [n]
    total_assignments: int  # tokens * topk, the same for every row
    balance_loss: np.ndarray  # float [n]
    topk: int = 1

    def __len__(self) -> int:
        return int(self.expert_tokens.shape[0])

    def row(self, i: int) -> RouterLoads:
        return RouterLoads(self.expert_tokens[i], self.kept_tokens[i], int(self.dropped[i]),
                           self.total_assignments, float(self.balance_loss[i]), self.topk)

    def per_rank(self, ep: int) -> np.ndarray:
        """Kept assignments per EP rank ``[n, ep]`` (experts contiguous, E/ep per rank)."""
        n, e = self.kept_tokens.shape
        return self.kept_tokens.reshape(n, ep, e // ep).sum(axis=2)

    def rank_shares(self, ep: int) -> tuple[np.ndarray, np.ndarray]:
        """:func:`~simulator.moe.alltoall.rank_shares` of every row: ``([n, ep], [n])``."""
        per_rank = self.per_rank(ep).astype(float)
        kept = per_rank.sum(axis=1)
        share = per_rank / np.where(kept > 0, kept, 1.0)[:, None]
        total = self.total_assignments
        return share, (kept / total if total else np.zeros_like(kept))

    def imbalance(self, ep: int) -> dict[str, np.ndarray]:
        """:meth:`RouterLoads.imbalance` of every row, as arrays ``[n]``."""
        n, e = self.expert_tokens.shape
        mean_e = self.total_assignments / e
        ranks = self.per_rank(ep)
        mean_r = ranks.mean(axis=1)
        ones = np.ones(n)
        safe_r = np.where(mean_r > 0, mean_r, 1.0)
        return {
            "expert_max_over_mean": self.expert_tokens.max(axis=1) / mean_e if mean_e else ones,
            "rank_max_over_mean": np.where(mean_r > 0, ranks.max(axis=1) / safe_r, 1.0),
            "dropped_fraction": (self.dropped / self.total_assignments
                                 if self.total_assignments else 0.0 * ones),
            "balance_loss": self.balance_loss.astype(float),
        }


def inclusion_probs_rows(logits: np.ndarray, topk: int) -> np.ndarray:
    """:func:`~simulator.moe.sampling.inclusion_probs` of every row ``[n, E]``.

    The same bracket doubling and Newton steps, row by row under a mask: a row
    stops where the scalar loop would ``break``, so each row equals the scalar
    result exactly. Identical rows are solved once (DeepSeek-V3's bias balancing
    selects on all-zero logits in every draw)."""
    if logits.shape[0] > 1 and (logits == logits[:1]).all():
        return np.broadcast_to(inclusion_probs_rows(logits[:1], topk), logits.shape)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    lo = 0.0
    hi = np.ones(w.shape[0])
    while (low := -np.expm1(-w * hi[:, None]).sum(axis=1) < topk).any():
        hi = np.where(low, hi * 2.0, hi)
    active = np.ones(w.shape[0], dtype=bool)
    for _ in range(NEWTON_ITERATIONS):
        f = -np.expm1(-w * hi[:, None]).sum(axis=1) - topk
        active &= ~(np.abs(f) < 1e-9 * topk)
        if not active.any():
            break
        step = hi - f / (w * np.exp(-w * hi[:, None])).sum(axis=1)
        hi = np.where(active, np.maximum(lo, step), hi)
    return -np.expm1(-w * hi[:, None])


def topk_counts_rows(logits: np.ndarray, tokens: int, topk: int,
                     rng: np.random.Generator) -> np.ndarray:
    """``[n, E]`` counts: row ``i`` is ``topk_counts(logits[i], tokens, topk, rng)`` called
    for ``i = 0, 1, ...`` in turn on the same generator (same numbers, same stream)."""
    logits = np.asarray(logits, dtype=float)
    n, e = logits.shape
    tokens = int(tokens)
    if n == 0:
        return np.zeros((0, e), dtype=np.int64)
    if topk >= e:  # every token picks every expert (router_topk = num_experts): no draw
        return np.full((n, e), tokens, dtype=np.int64)
    if tokens * e > EXACT_LIMIT:
        return _threshold_rows(logits, tokens, topk, rng)
    if tokens * e > CHUNK_ELEMENTS:  # huge: per row
        return np.array([topk_counts(r, tokens, topk, rng) for r in logits], dtype=np.int64)
    out = np.empty((n, e), dtype=np.int64)
    per = max(1, CHUNK_ELEMENTS // (tokens * e))  # rows scored at once, bounds memory
    for start in range(0, n, per):
        block = logits[start:start + per]
        b = block.shape[0]
        scores = block[:, None, :] + rng.gumbel(size=(b, tokens, e))
        if topk == 1:
            chosen = scores.argmax(axis=2)[..., None]
        else:
            chosen = np.argpartition(-scores, topk - 1, axis=2)[..., :topk]
        flat = chosen.reshape(b, -1) + (np.arange(b) * e)[:, None]
        out[start:start + b] = np.bincount(flat.ravel(), minlength=b * e).reshape(b, e)
    return out


def _threshold_rows(logits: np.ndarray, tokens: int, topk: int,
                    rng: np.random.Generator) -> np.ndarray:
    pi = inclusion_probs_rows(logits, topk)
    state = rng.bit_generator.state
    counts = rng.multinomial(tokens * topk, pi / pi.sum(axis=1, keepdims=True))
    if (counts > tokens).any():  # a row needs the one-pick-per-token fix: replay per row
        rng.bit_generator.state = state
        return np.array([_threshold_counts(r, tokens, topk, rng) for r in logits],
                        dtype=np.int64)
    return counts.astype(np.int64)


def route_rows(moe: MoEConfig, tokens: int, rng: np.random.Generator, n: int,
               step: int | None = None) -> LoadRows:
    """``n`` independent draws of one MoE layer's loads (``tokens`` tokens each)."""
    topk, e = moe.router_topk, moe.num_experts
    total = int(tokens) * topk
    if moe.router_load == "uniform":
        counts = np.tile(uniform_counts(total, e), (n, 1))
        probs = np.full((n, e), 1.0 / e)
    elif moe.router_load == "trace":
        table = load_trace(str(moe.router_trace), e)
        pick = rng.integers(table.shape[0], size=n)
        scaled = np.array([largest_remainder(r.astype(float), total) for r in table])
        counts = scaled[pick]
        probs = (table / table.sum(axis=1, keepdims=True))[pick]
    else:
        logits = effective_skew(moe, step) * rng.standard_normal((n, e))
        select = bias_residual(logits, step) if moe.balancing == "aux_free_bias" else logits
        counts = topk_counts_rows(select, tokens, topk, rng)
        probs = softmax(logits)
    return make_rows(counts, probs, moe, tokens)


def make_rows(counts: np.ndarray, probs: np.ndarray, moe: MoEConfig, tokens: int) -> LoadRows:
    """:func:`~simulator.moe.router.make_loads` for every row: capacity drop, balance loss."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(tokens) * moe.router_topk
    cap = capacity(moe.capacity_factor, int(tokens), moe.router_topk, moe.num_experts)
    kept = counts.copy() if cap is None else np.minimum(counts, int(cap))
    dropped = counts.sum(axis=1) - kept.sum(axis=1)
    if total:
        loss = counts.shape[1] * (counts / total * probs).sum(axis=1)
    else:
        loss = np.ones(counts.shape[0])
    return LoadRows(counts, kept, dropped, total, loss, moe.router_topk)
