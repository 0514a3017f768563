"""Seeded randomness and the two ways tokens are spread over experts.

Determinism
-----------
Nothing in :mod:`simulator.moe` touches global random state. Every random draw
takes a :class:`numpy.random.Generator` made by :func:`rng_for` from one root
seed (``training.seed``) and a tuple of non-negative integer keys, e.g.
``rng_for(seed, 16)`` for a step's router draws
(:mod:`simulator.workload.moe.draws`). The keys become the ``spawn_key`` of a
:class:`numpy.random.SeedSequence`, so streams for different keys are
statistically independent and the same (seed, keys) always gives the same
numbers, whatever order the simulator asks for them in.

Top-k routing as sampling without replacement
---------------------------------------------
A learned router scores each token against every expert and keeps the ``k``
best (Shazeer et al. 2017; GShard, Lepikhin et al. 2020). We model a token's
scores as a shared per-expert logit ``l_i`` (how popular expert ``i`` is) plus
independent standard Gumbel noise (how this token differs from the average).
By the Gumbel-top-k trick, the ``k`` largest of ``l_i + G_i`` are exactly a
draw of ``k`` *distinct* experts without replacement with probabilities
``softmax(l)`` — so top-k distinctness is modelled, not approximated, and a
per-expert bias added to ``l`` (DeepSeek-V3) acts on selection exactly as it
does in the real router.

For large problems (``tokens * experts > EXACT_LIMIT``) sampling every token
is slow, so :func:`topk_counts` switches to a fixed-threshold approximation:
expert ``i`` is in a token's top-k when ``l_i + G_i`` clears a threshold
``t`` chosen so the expected number of picks is ``k``, giving inclusion
probability ``pi_i = 1 - exp(-exp(l_i - t))`` (exact in the many-experts
limit); counts are then a multinomial draw of ``tokens * k`` with
probabilities ``pi / k``, capped at one pick per token and expert.
"""

from __future__ import annotations

import numpy as np

CHUNK_ELEMENTS = 1 << 20  # scores materialised at once (tokens x experts), bounds memory
EXACT_LIMIT = 1 << 12  # tokens*experts above which the threshold approximation is used (speed)


def rng_for(seed: int, *key: int) -> np.random.Generator:
    """Independent generator for ``(seed, *key)``: ``SeedSequence(seed, spawn_key=key)``.

    >>> rng_for(0, 3, 1).integers(100) == rng_for(0, 3, 1).integers(100)
    True
    """
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=tuple(
        int(k) for k in key)))


def uniform_counts(total: int, num_experts: int) -> np.ndarray:
    """``total`` assignments spread as evenly as integers allow (int64 [num_experts]).

    Each expert gets ``total // num_experts``; the remainder goes one each to
    experts spaced evenly over the index range (not all to the first experts,
    which would pile the extras onto EP rank 0).
    """
    base, rem = divmod(int(total), int(num_experts))
    idx = np.arange(num_experts, dtype=np.int64)
    extra = (idx + 1) * rem // num_experts - idx * rem // num_experts
    return base + extra


def topk_counts(logits: np.ndarray, tokens: int, topk: int,
                rng: np.random.Generator) -> np.ndarray:
    """Per-expert assignment counts when ``tokens`` tokens each pick ``topk`` distinct experts.

    Selection is Gumbel-top-k over ``logits`` (see module docstring), processed
    in chunks of tokens so memory stays bounded for large micro-batches.
    """
    num_experts = logits.shape[0]
    if topk >= num_experts:  # every token picks every expert: nothing to draw
        return np.full(num_experts, int(tokens), dtype=np.int64)
    if int(tokens) * num_experts > EXACT_LIMIT:
        return _threshold_counts(logits, int(tokens), topk, rng)
    counts = np.zeros(num_experts, dtype=np.int64)
    rows = max(1, CHUNK_ELEMENTS // num_experts)
    for start in range(0, int(tokens), rows):
        n = min(rows, int(tokens) - start)
        scores = logits[None, :] + rng.gumbel(size=(n, num_experts))
        if topk == 1:
            chosen = scores.argmax(axis=1)
        else:
            chosen = np.argpartition(-scores, topk - 1, axis=1)[:, :topk]
        counts += np.bincount(chosen.ravel(), minlength=num_experts)
    return counts


def inclusion_probs(logits: np.ndarray, topk: int) -> np.ndarray:
    """``pi_i = 1 - exp(-w_i * c)``, ``w = exp(l - max l)``, with ``sum(pi) = topk``."""
    w = np.exp(logits - logits.max())
    lo, hi = 0.0, 1.0
    while -np.expm1(-w * hi).sum() < topk:
        hi *= 2.0
    for _ in range(30):  # Newton from the upper bracket: the sum is concave in c
        f = -np.expm1(-w * hi).sum() - topk
        if abs(f) < 1e-9 * topk:
            break
        hi = max(lo, hi - f / float((w * np.exp(-w * hi)).sum()))
    return -np.expm1(-w * hi)


_PI_CACHE: dict[tuple[bytes, int], np.ndarray] = {}


def _cached_inclusion_probs(logits: np.ndarray, topk: int) -> np.ndarray:
    """:func:`inclusion_probs`, memoised on the exact logits: DeepSeek-V3's bias balancing
    selects on all-zero logits in every (layer, micro-batch) draw (identical results)."""
    key = (logits.tobytes(), int(topk))
    pi = _PI_CACHE.get(key)
    if pi is None:
        if len(_PI_CACHE) > 64:
            _PI_CACHE.clear()
        pi = _PI_CACHE[key] = inclusion_probs(logits, topk)
    return pi


def _threshold_counts(logits: np.ndarray, tokens: int, topk: int,
                      rng: np.random.Generator) -> np.ndarray:
    pi = _cached_inclusion_probs(logits, topk)
    counts = rng.multinomial(tokens * topk, pi / pi.sum()).astype(np.int64)
    while (over := int(np.maximum(counts - tokens, 0).sum())):  # an expert at most once a token
        counts = np.minimum(counts, tokens)
        room = (tokens - counts).astype(float)
        counts += rng.multinomial(over, room / room.sum())
    return counts


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis (one draw ``[E]`` or many ``[n, E]``)."""
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to ``weights`` that sum exactly to ``total``."""
    share = weights / weights.sum() * total
    out = np.floor(share).astype(np.int64)
    short = int(total) - int(out.sum())
    if short:
        out[np.argsort(-(share - out), kind="stable")[:short]] += 1
    return out
