"""Mixture-of-experts router load model: who gets how many tokens, and what it costs.

A mixture-of-experts layer sends each token to ``router_topk`` of
``num_experts`` expert FFNs (Shazeer et al. 2017; GShard, Lepikhin et al.
2020; Switch Transformer, Fedus et al. 2021). The simulator's cost of such a
layer depends on *how evenly* the router spreads tokens: the busiest expert
(and EP rank) sets the pace, capacity limits drop the overflow, and the
expert-parallel all-to-all moves each assignment to its expert's rank.

* :mod:`.sampling` -- seeded generators (:func:`rng_for`) and top-k sampling.
* :mod:`.capacity` -- capacity factor, dropping, Switch balance loss.
* :mod:`.router` -- :func:`route`: per micro-batch and layer loads
  (uniform / skewed / trace), :class:`RouterLoads` and its imbalance figures.
* :mod:`.batch` -- the same for many draws at once (numpy over draws), as a
  simulated step draws them (:mod:`simulator.workload.moe.draws`).
* :mod:`.trace` -- recorded loads from CSV.
* :mod:`.balancing` -- aux loss and DeepSeek-V3 aux-loss-free bias over steps.
* :mod:`.alltoall` -- dispatch/combine bytes per EP rank, node-limited routing.

Everything is numpy and deterministic given ``training.seed``: no global
random state.
"""

from .alltoall import alltoall_bytes, alltoall_matrix, internode_bytes
from .balancing import simulate_balancing, simulate_bias_balancing
from .capacity import apply_capacity, capacity, switch_balance_loss
from .router import RouterLoads, effective_skew, is_moe_layer, route
from .sampling import rng_for
from .trace import load_trace

__all__ = [
    "RouterLoads", "alltoall_bytes", "alltoall_matrix", "apply_capacity", "capacity",
    "effective_skew", "internode_bytes", "is_moe_layer", "load_trace", "rng_for", "route",
    "simulate_balancing", "simulate_bias_balancing", "switch_balance_loss",
]
