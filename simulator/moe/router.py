"""Router load model: how many token-assignments each expert receives.

One call of :func:`route` answers, for one micro-batch in one MoE layer, how
the ``tokens * router_topk`` assignments fall on the ``num_experts`` experts,
what capacity drops, and the Switch balance loss. ``model.moe.router_load``
chooses the shape of the load:

``uniform``
    Every expert gets ``tokens * topk / num_experts`` (integer remainder spread
    evenly). Deterministic; the ideal the other modes are measured against.
``skewed``
    Expert popularity is drawn per call: logits ``l_i = s * z_i`` with
    ``z_i ~ N(0, 1)`` and ``s = router_skew``, i.e. log-normal popularity
    weights with sigma ``s``. ``s = 0`` is a balanced but *random* router
    (only sampling noise); ``s = 0.5`` is mild, ``s = 1`` strong, ``s = 2``
    near-collapse. Each token then picks ``topk`` distinct experts by
    Gumbel-top-k (:mod:`simulator.moe.sampling`). The mean router probability
    ``P_i`` for the balance loss is ``softmax(s * z)``.
``trace``
    Counts recorded from a real run (:mod:`simulator.moe.trace`), rescaled to
    ``tokens * topk``; ``P_i`` is taken equal to the load fraction. Traces are
    replayed as recorded: they already contain that run's balancing.

Balancing (``model.moe.balancing``) changes the effective skew of ``skewed``
routing. ``step`` is the number of training steps balancing has acted; the
default ``None`` means a run in steady state, which is what a performance
simulation of a long job wants.

``aux_loss`` (Fedus et al. 2021)
    The auxiliary loss pulls the router toward even load at some cost to model
    quality. We model its effect as damping the skew:
    ``s_eff(t) = s * (D + (1 - D) * exp(-t / TAU))`` with ``D = AUX_LOSS_DAMPING``
    (0.3) and ``TAU = AUX_LOSS_TAU`` (100 steps). These constants are a modelling
    assumption, not a measurement; change them here.
``aux_free_bias`` (DeepSeek-AI 2024, DeepSeek-V3 report, sec. 2.1.2)
    A per-expert bias ``b_i`` is added to the scores *for selection only* and
    updated each step by ``b_i += gamma * sign(mean_load - load_i)``. The bias
    moves at most ``gamma`` per step toward ``-l_i`` (up to a shared constant),
    so after ``t`` steps the residual logit offset is the centred logits
    soft-thresholded by ``gamma * t``; in steady state it is 0 and only sampling
    noise remains. :func:`simulator.moe.simulate_bias_balancing` runs the actual
    update loop. The gate values, and so ``P_i``, keep the unbiased logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config.workload import MoEConfig
from ..errors import ConfigError
from .capacity import apply_capacity, capacity, switch_balance_loss
from .sampling import largest_remainder, softmax, topk_counts, uniform_counts
from .trace import load_trace

AUX_LOSS_DAMPING = 0.3  # steady-state fraction of the skew left with the aux loss on
AUX_LOSS_TAU = 100.0  # steps for the aux loss to take effect (e-folding)
DEFAULT_GAMMA = 1e-3  # DeepSeek-V3 bias update speed


@dataclass(frozen=True, eq=False)  # numpy fields: no value equality or hash
class RouterLoads:
    """Assignments per expert for one micro-batch of one MoE layer."""

    expert_tokens: np.ndarray  # int64 [num_experts], received before capacity drop
    kept_tokens: np.ndarray  # after capacity drop (== expert_tokens when dropless)
    dropped: int  # assignments dropped
    total_assignments: int  # tokens * topk
    balance_loss: float
    topk: int = 1  # experts per token (so byte helpers can recover token counts)

    @property
    def num_experts(self) -> int:
        return int(self.expert_tokens.shape[0])

    def per_rank(self, ep: int) -> np.ndarray:
        """Kept assignments per EP rank; experts are placed contiguously, E/ep per rank."""
        if ep < 1 or self.num_experts % ep:
            raise ConfigError("parallelism.expert", ep,
                              f"must divide model.moe.num_experts ({self.num_experts})")
        return self.kept_tokens.reshape(ep, -1).sum(axis=1)

    def imbalance(self, ep: int) -> dict[str, float]:
        """Headline figures. Expert max/mean is on received load (the router's skew);
        rank max/mean is on kept load (the work each EP rank actually does)."""
        mean_e = self.total_assignments / self.num_experts
        ranks = self.per_rank(ep)
        mean_r = ranks.mean()
        return {
            "expert_max_over_mean": float(self.expert_tokens.max() / mean_e) if mean_e else 1.0,
            "rank_max_over_mean": float(ranks.max() / mean_r) if mean_r else 1.0,
            "dropped_fraction": (self.dropped / self.total_assignments
                                 if self.total_assignments else 0.0),
            "balance_loss": float(self.balance_loss),
        }


def skew_factor(balancing: str, step: int | None = None) -> float:
    """Multiplier on the router logits left by ``balancing`` at ``step`` (None: steady
    state). Only ``aux_loss`` damps the logits; the bias acts on selection instead."""
    if balancing != "aux_loss":
        return 1.0
    decay = 0.0 if step is None else float(np.exp(-max(step, 0) / AUX_LOSS_TAU))
    return AUX_LOSS_DAMPING + (1.0 - AUX_LOSS_DAMPING) * decay


def effective_skew(moe: MoEConfig, step: int | None = None) -> float:
    """``router_skew`` after ``aux_loss`` damping at ``step`` (None: steady state)."""
    return float(moe.router_skew) * skew_factor(moe.balancing, step)


def bias_residual(logits: np.ndarray, step: int | None, gamma: float = DEFAULT_GAMMA):
    """Selection logits after ``step`` sign-updates of the DeepSeek-V3 bias (analytic);
    ``logits`` is one draw ``[E]`` or many ``[n, E]`` (each row centred on its median)."""
    if step is None:  # steady state: the bias has absorbed the popularity
        return np.zeros_like(logits)
    centred = logits - np.median(logits, axis=-1, keepdims=True)
    return np.sign(centred) * np.maximum(np.abs(centred) - gamma * max(step, 0), 0.0)


def route(moe: MoEConfig, tokens: int, rng: np.random.Generator,
          step: int | None = None) -> RouterLoads:
    """Loads of one micro-batch (``tokens`` tokens) in one MoE layer; see module docs."""
    topk, n = moe.router_topk, moe.num_experts
    total = int(tokens) * topk
    if moe.router_load == "uniform":
        counts, probs = uniform_counts(total, n), np.full(n, 1.0 / n)
    elif moe.router_load == "trace":
        table = load_trace(str(moe.router_trace), n)
        recorded = table[rng.integers(table.shape[0])]
        counts = largest_remainder(recorded.astype(float), total)
        probs = recorded / recorded.sum()
    else:
        logits = effective_skew(moe, step) * rng.standard_normal(n)
        select = bias_residual(logits, step) if moe.balancing == "aux_free_bias" else logits
        counts, probs = topk_counts(select, tokens, topk, rng), softmax(logits)
    return make_loads(counts, probs, moe, tokens)


def make_loads(counts: np.ndarray, probs: np.ndarray, moe: MoEConfig,
               tokens: int) -> RouterLoads:
    """Assemble :class:`RouterLoads`: capacity drop and balance loss from raw counts."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(tokens) * moe.router_topk
    cap = capacity(moe.capacity_factor, int(tokens), moe.router_topk, moe.num_experts)
    kept, dropped = apply_capacity(counts, cap)
    frac = counts / total if total else np.zeros_like(counts, dtype=float)
    loss = switch_balance_loss(frac, probs) if total else 1.0
    return RouterLoads(counts, kept, dropped, total, loss, moe.router_topk)


def is_moe_layer(moe: MoEConfig, layer: int) -> bool:
    """Whether 0-based decoder ``layer`` has an MoE block: after ``first_k_dense``
    dense layers, every ``layer_freq``-th layer (Megatron-Core ``--moe-layer-freq``)."""
    return layer >= moe.first_k_dense and (layer - moe.first_k_dense) % moe.layer_freq == 0
