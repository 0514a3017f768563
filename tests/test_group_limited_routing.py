"""Group-limited routing (Megatron-Core --moe-router-num-groups / --moe-router-group-topk).

The DeepEP volume counts one copy per destination rank (NVLink) and per destination node
(RDMA). Group-limited routing bounds both; :func:`group_hits` gives the probabilities in
closed form, checked here against a Monte-Carlo replay of Megatron-Core's
``group_limited_topk`` (group score = sum of the group's top ``k / G`` expert scores,
top-``G`` groups, then top-``k`` experts inside them) and against the layouts whose answer
is exact: AutoModel's fake balanced gate (token ``t`` takes experts ``8t .. 8t + 7``) and
DeepSeek-V3's node-limited routing. Layouts where groups and ranks cut each other are
checked against the replay only.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.api import resolve, simulate_resolved
from simulator.errors import ConfigError
from simulator.workload.moe.dispatch import deepep_tokens, group_hits


def _megatron_hits(experts: int, groups: int, group_topk: int, topk: int, units: int,
                   tokens: int = 20000, seed: int = 7) -> np.ndarray:
    """Fraction of tokens that hit each of ``units`` (equal blocks of consecutive experts),
    routing random scores the way Megatron-Core's group_limited_topk does."""
    rng = np.random.default_rng(seed)
    scores = rng.random((tokens, experts))
    per_group = scores.reshape(tokens, groups, experts // groups)
    top = np.sort(per_group, axis=-1)[..., -(topk // group_topk):].sum(axis=-1)
    chosen = np.argsort(-top, axis=-1)[:, :group_topk]
    mask = np.zeros((tokens, groups), bool)
    np.put_along_axis(mask, chosen, True, axis=-1)
    masked = np.where(np.repeat(mask, experts // groups, axis=-1), scores, -np.inf)
    picks = np.argsort(-masked, axis=-1)[:, :topk]
    unit = picks // (experts // units)
    hit = np.zeros((tokens, units), bool)
    np.put_along_axis(hit, unit, True, axis=-1)
    return hit.mean(axis=0)


@pytest.mark.parametrize("experts,groups,group_topk,topk,units", [
    (256, 8, 4, 8, 64),   # DeepSeek-V3 groups, EP 64: a group spans 8 ranks
    (256, 8, 4, 8, 8),    # the same per node (8 nodes of 8 ranks): one group per node
    (256, 8, 4, 8, 4),    # 4 nodes of EP 32: each node holds two groups
    (128, 16, 1, 8, 8),   # one group of 8 per token, two groups per rank
    (64, 8, 2, 6, 16),    # a group spans two ranks
    (384, 48, 1, 8, 32),  # Kimi K2's fake gate on EP 32: 8-expert groups over 12 a rank
    (96, 6, 2, 8, 4),     # 16-expert groups over 24 a rank, two groups a token
])
def test_group_hits_match_a_replay_of_megatron_group_limited_topk(experts, groups,
                                                                  group_topk, topk, units):
    share = np.full(units, 1.0 / units)
    closed = group_hits(share, experts // units, (experts, groups, group_topk), topk)
    replay = _megatron_hits(experts, groups, group_topk, topk, units)
    assert closed == pytest.approx(replay, abs=0.02)
    # and the expected units per token, the quantity the volume scales with
    assert closed.sum() == pytest.approx(replay.sum(), rel=0.03)


def test_one_group_limits_nothing():
    """A single group holds every expert: the run costs as ungrouped routing (the layer
    passes no groups), and the closed form of that group is within 3 % of it (distinct
    picks against the ungrouped model's independent ones)."""
    free = _ep_seconds({})
    one = _ep_seconds({"model.moe.router_num_groups": 1, "model.moe.router_group_topk": 1})
    assert one == free
    share = np.full(16, 1 / 16)
    grouped = group_hits(share, 8, (128, 1, 1), 8)
    assert grouped.sum() == pytest.approx((1 - (1 - share) ** 8).sum(), rel=0.03)


def test_fake_balanced_gate_sends_each_token_to_one_rank():
    """AutoModel's FakeBalancedGate routes token t to experts 8t .. 8t+7 (mod 128): group-
    limited routing with 16 groups of 8, one group per token. With 16 experts per rank
    (EP 8) every token lands on exactly one rank, its own one time in eight."""
    nvl, rdma = deepep_tokens(np.full(8, 1 / 8), 8, 8, None, (128, 16, 1))
    assert nvl == pytest.approx(np.full(8, 7 / 8))
    assert not rdma.any()
    ungrouped, _ = deepep_tokens(np.full(8, 1 / 8), 8, 8, None)
    assert ungrouped[0] == pytest.approx(8 * 7 / 8 * (1 - (7 / 8) ** 8))  # 4.59 copies


def test_node_groups_give_node_limited_rdma():
    """One group per node and group_topk M is DeepSeek-V3's node-limited routing: M nodes
    per token, M - P(own node) = M (1 - 1/nodes) RDMA copies."""
    share = np.full(64, 1 / 64)
    _, rdma_groups = deepep_tokens(share, 8, 8, None, (256, 8, 4))
    _, rdma_nodes = deepep_tokens(share, 8, 8, 4)
    assert rdma_groups == pytest.approx(np.full(64, 4 * 7 / 8))
    assert rdma_groups == pytest.approx(rdma_nodes)


def test_a_more_loaded_group_is_selected_more_often():
    share = np.array([0.4, 0.2, 0.2, 0.2])
    hits = group_hits(share, 8, (32, 4, 1), 8)
    assert hits == pytest.approx(share)  # one group per token: P(select) = its share
    assert group_hits(share, 8, (32, 4, 4), 8) == pytest.approx(np.ones(4))


QWEN3_MOE = {
    "model.num_layers": 2, "model.hidden_size": 2048, "model.num_attention_heads": 32,
    "model.num_query_groups": 4, "model.kv_channels": 128, "model.seq_length": 4096,
    "model.moe.num_experts": 128, "model.moe.router_topk": 8, "model.moe.ffn_hidden_size": 768,
    "model.moe.first_k_dense": 0, "model.moe.token_dispatcher_type": "flex",
    "model.moe.max_nodes_per_token": None, "model.moe.shared_expert_ffn_hidden_size": 0,
    "model.moe.router_num_groups": None, "model.moe.router_group_topk": None,
    "model.moe.router_load": "uniform",
    "parallelism.tensor": 1, "parallelism.pipeline": 1, "parallelism.data": 8,
    "parallelism.expert": 8, "parallelism.virtual_pipeline": None,
    "parallelism.pipeline_schedule": "1f1b", "parallelism.pipeline_model_parallel_layout": None,
    "training.global_batch_size": 16, "training.micro_batch_size": 1,
}


def _ep_seconds(extra: dict) -> float:
    w, t = resolve("deepseek-v3", "dgx-h100", {**QWEN3_MOE, **extra})
    return simulate_resolved(w, t)[0].ep_breakdown_s["dispatch"]


def test_one_group_per_token_shrinks_the_deepep_dispatch():
    free = _ep_seconds({})
    limited = _ep_seconds({"model.moe.router_num_groups": 16, "model.moe.router_group_topk": 1})
    # 0.875 token copies instead of 4.59: the dispatch shrinks about five-fold
    assert 0.12 < limited / free < 0.3


@pytest.mark.parametrize("extra,field", [
    ({"model.moe.router_num_groups": 16}, "model.moe.router_group_topk"),
    ({"model.moe.router_group_topk": 1}, "model.moe.router_num_groups"),
    ({"model.moe.router_num_groups": 12, "model.moe.router_group_topk": 1},
     "model.moe.router_num_groups"),
    ({"model.moe.router_num_groups": 16, "model.moe.router_group_topk": 17},
     "model.moe.router_group_topk"),
    ({"model.moe.router_num_groups": 64, "model.moe.router_group_topk": 1},
     "model.moe.router_topk"),
    ({"model.moe.router_num_groups": 16, "model.moe.router_group_topk": 1,
      "model.moe.max_nodes_per_token": 2}, "model.moe.max_nodes_per_token"),
])
def test_bad_group_settings_name_the_field(extra, field):
    with pytest.raises(ConfigError) as err:
        w, t = resolve("deepseek-v3", "dgx-h100", {**QWEN3_MOE, **extra})
        simulate_resolved(w, t)
    assert err.value.field == field
