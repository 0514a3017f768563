"""Expert capacity, token dropping and the Switch load-balancing loss.

Capacity (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021)
------------------------------------------------------------------------------
With a capacity factor ``c`` every expert has a fixed buffer of
``floor(c * tokens * top_k / num_experts)`` assignments per batch: ``c`` times
the load it would see if routing were perfectly even. Assignments beyond the
buffer are *dropped*: the token skips that expert and flows on through the
residual connection. ``capacity_factor = None`` means dropless routing
(Megatron-Core's default, used by Mixtral and DeepSeek-V3): buffers grow to fit.

Worked example: 64 tokens, 8 experts, top-2, factor 1.25 give capacity
``floor(1.25 * 64 * 2 / 8) = 20``; loads ``[6, 3, 6, 14, 16, 19, 25, 39]``
overflow by ``5 + 19 = 24`` of the 128 assignments.

Balance loss (Fedus et al. 2021, eq. 4)
---------------------------------------
``loss = n * sum_i f_i * P_i`` where ``f_i`` is the fraction of assignments
routed to expert ``i`` and ``P_i`` the mean router probability of expert ``i``.
Both vectors sum to 1, so the loss is exactly 1.0 for a uniform router and
grows as load and probability concentrate on the same experts.
"""

from __future__ import annotations

import math

import numpy as np


def capacity(capacity_factor: float | None, tokens: int, topk: int,
             num_experts: int) -> int | None:
    """Per-expert buffer in assignments, or ``None`` when dropless."""
    if capacity_factor is None:
        return None
    # round() first so 0.7 * 100 (= 69.99999...) does not floor to 69
    return math.floor(round(capacity_factor * tokens * topk / num_experts, 9))


def apply_capacity(expert_tokens: np.ndarray, cap: int | None) -> tuple[np.ndarray, int]:
    """``(kept, dropped)``: loads clipped at ``cap`` and the number of assignments cut."""
    counts = np.asarray(expert_tokens, dtype=np.int64)
    if cap is None:
        return counts.copy(), 0
    kept = np.minimum(counts, int(cap))
    return kept, int(counts.sum() - kept.sum())


def switch_balance_loss(fraction_tokens: np.ndarray, mean_probs: np.ndarray) -> float:
    """Switch Transformer auxiliary loss ``n * sum(f_i * P_i)`` (1.0 when uniform)."""
    f = np.asarray(fraction_tokens, dtype=float)
    p = np.asarray(mean_probs, dtype=float)
    return float(f.shape[0] * np.dot(f, p))
