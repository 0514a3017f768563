"""Load balancing over training steps.

:func:`simulate_balancing` follows one MoE layer's router through ``steps``
training steps under the workload's ``model.moe.balancing`` strategy;
:func:`simulate_bias_balancing` forces DeepSeek-V3's auxiliary-loss-free
bias. Each step routes ``tokens`` tokens (one batch as the balancer sees it).

The router's *preference* is persistent across steps, as a learned router's
is: logits ``l = s * z`` with ``z ~ N(0, 1)`` drawn once from
``rng_for(seed, 0)`` (for ``trace`` workloads, ``l = log`` of the mean
recorded load fraction, i.e. the recorded run treated as unbalanced). Each
step draws fresh per-token Gumbel noise from ``rng_for(seed, 1, step)``.

* ``none``: the skew stays; max/mean fluctuates around its start value.
* ``aux_loss`` (Fedus et al. 2021): the skew decays toward
  ``AUX_LOSS_DAMPING * s`` with time constant ``AUX_LOSS_TAU`` steps
  (:func:`simulator.moe.router.skew_factor`), a modelling assumption.
* ``aux_free_bias`` (DeepSeek-AI 2024): the real update loop. Selection uses
  ``l + b``; after each step ``b_i += gamma * sign(mean_load - load_i)``.
  Overloaded experts lose score, idle ones gain, and the loads converge in
  about ``max|l_i - median(l)| / gamma`` steps, then jitter by ``gamma``.
  ``gamma`` is in this model's logit units (Gumbel noise has standard
  deviation 1.28); DeepSeek-V3 used 0.001 on sigmoid affinities, whose spread
  is smaller, so larger values (0.01) are reasonable here for short runs.

Every step records ``max_over_mean`` (expert max/mean received load),
``rank_max_over_mean`` (when ``ep`` is given), ``balance_loss`` (Switch form,
with ``P = softmax(l)``: the bias steers selection, not the gate) and
``dropped_fraction`` (capacity drops, 0 when dropless).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..config.workload import MoEConfig
from ..errors import ConfigError
from .router import DEFAULT_GAMMA, RouterLoads, make_loads, skew_factor
from .sampling import rng_for, softmax, topk_counts, uniform_counts
from .trace import load_trace

if TYPE_CHECKING:
    import pandas as pd


def _base_logits(moe: MoEConfig, seed: int) -> np.ndarray:
    n = moe.num_experts
    if moe.router_load == "uniform":
        return np.zeros(n)
    if moe.router_load == "trace":
        share = load_trace(str(moe.router_trace), n).sum(axis=0).astype(float)
        share /= share.sum()
        return np.log(np.maximum(share, 1e-6))
    return rng_for(seed, 0).standard_normal(n)  # scaled by the (effective) skew per step


def simulate_balancing(moe: MoEConfig, tokens: int, steps: int, seed: int,
                       gamma: float = DEFAULT_GAMMA, ep: int | None = None,
                       strategy: str | None = None) -> pd.DataFrame:
    """Per-step load figures under ``strategy`` (default ``moe.balancing``)."""
    strategy = strategy or moe.balancing
    if strategy not in ("none", "aux_loss", "aux_free_bias"):
        raise ConfigError("model.moe.balancing", strategy,
                          "must be one of 'none', 'aux_loss', 'aux_free_bias'")
    if steps < 1 or tokens < 1:
        raise ConfigError("--steps" if steps < 1 else "tokens", min(steps, tokens),
                          "must be at least 1")
    base = _base_logits(moe, seed)
    if moe.router_load == "skewed":
        base = base * moe.router_skew
    bias = np.zeros(moe.num_experts)
    rows = []
    for step in range(steps):
        logits = base * skew_factor(strategy, step)
        if moe.router_load == "uniform":
            counts = uniform_counts(int(tokens) * moe.router_topk, moe.num_experts)
        else:
            counts = topk_counts(logits + bias, tokens, moe.router_topk, rng_for(seed, 1, step))
        rows.append(_row(step, make_loads(counts, softmax(logits), moe, tokens), ep))
        if strategy == "aux_free_bias":
            bias += gamma * np.sign(counts.mean() - counts)
    import pandas as pd  # heavy, loaded on first use: keeps `import simulator` light

    return pd.DataFrame(rows)


def _row(step: int, loads: RouterLoads, ep: int | None) -> dict[str, float]:
    fig = loads.imbalance(ep or 1)
    row = {"step": step, "max_over_mean": fig["expert_max_over_mean"]}
    if ep:
        row["rank_max_over_mean"] = fig["rank_max_over_mean"]
    row["balance_loss"] = fig["balance_loss"]
    row["dropped_fraction"] = fig["dropped_fraction"]
    return row


def simulate_bias_balancing(moe: MoEConfig, tokens: int, steps: int, seed: int,
                            gamma: float = DEFAULT_GAMMA) -> pd.DataFrame:
    """DeepSeek-V3 auxiliary-loss-free balancing from the workload's router, per step:
    ``step, max_over_mean, balance_loss, dropped_fraction``."""
    return simulate_balancing(moe, tokens, steps, seed, gamma, strategy="aux_free_bias")
