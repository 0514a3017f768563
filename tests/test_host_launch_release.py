"""Host launch by software release: the release's fusion flags set the kernels the CPU issues.

An eager early release (no CUDA graphs, unfused router and permute, eager RoPE) is host
bound on GB200 where a current one (fused router / permute, TE graphs of attn, router and
preprocessing) is not; the counts follow Megatron-Core's flags (workload/moe/host.py).
"""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.errors import ConfigError
from simulator.workload.chunk_cost import ChunkCoster
from simulator.workload.moe.host import (
    FUSED_ROUTER_KERNELS,
    ROUTER_KERNELS,
    UNFUSED_ROPE_EXTRA_KERNELS,
    Fusions,
    launch_counts,
)

EAGER = {"training.cuda_graph_impl": "none", "training.apply_rope_fusion": False,
         "model.moe.router_fusion": False, "model.moe.permute_fusion": False}
CURRENT = {"training.cuda_graph_impl": "transformer_engine",
           "training.cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
           "model.moe.router_fusion": True, "model.moe.permute_fusion": True}


def test_fusions_cut_the_launches_each_flag_names():
    eager = launch_counts(40, 4, True, set(), Fusions(router=False, permute=False, rope=False))
    fused = launch_counts(40, 4, True, set(), Fusions(router=True, permute=True, rope=True))
    assert eager.router == ROUTER_KERNELS and fused.router == FUSED_ROUTER_KERNELS
    assert fused.preprocess < eager.preprocess and fused.dispatch_combine < eager.dispatch_combine
    assert eager.attention - fused.attention == UNFUSED_ROPE_EXTRA_KERNELS
    assert fused.experts == eager.experts  # grouped GEMMs: one per expert either way
    graphed = launch_counts(40, 4, True, {"attn", "moe_router", "moe_preprocess"}, Fusions())
    assert (graphed.attention, graphed.router, graphed.preprocess) == (1.0, 1.0, 1.0)


def test_eager_release_is_host_bound_and_the_current_one_much_less():
    eager = simulate("deepseek-v3", "gb200-nvl72", EAGER)
    current = simulate("deepseek-v3", "gb200-nvl72", CURRENT)
    assert eager.host_bound_fraction > 0.3
    assert current.host_bound_fraction < eager.host_bound_fraction / 2
    assert current.step_time_s < eager.step_time_s
    # an x86 DGX H100 node with the same eager release is host bound less (longer kernels)
    h100 = simulate("deepseek-v3", "dgx-h100", EAGER)
    assert h100.host_bound_fraction < eager.host_bound_fraction


def _synced(extra):
    from simulator.api import resolve
    from simulator.hardware import Topology
    w, t = resolve("mixtral-8x7b", "dgx-h100", extra)
    return ChunkCoster(w, Topology.from_config(t)).moe.synced


def test_only_drop_and_pad_is_sync_free():
    assert _synced({})  # dropless: the host reads tokens_per_expert
    assert _synced({"model.moe.capacity_factor": 1.0})  # dropping, unpadded: still a sync
    assert not _synced({"model.moe.capacity_factor": 1.0,
                        "model.moe.pad_expert_input_to_capacity": True})
    with pytest.raises(ConfigError, match=r"model\.moe\.pad_expert_input_to_capacity"):
        _synced({"model.moe.pad_expert_input_to_capacity": True})


def test_enable_cuda_graph_is_megatron_core_s_local_graphs():
    scope = {"training.cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"]}
    legacy = simulate("deepseek-v3", "gb200-nvl72", {**scope, "training.enable_cuda_graph": True})
    local = simulate("deepseek-v3", "gb200-nvl72", {**scope, "training.cuda_graph_impl": "local"})
    eager = simulate("deepseek-v3", "gb200-nvl72", scope)
    assert legacy.step_time_s == local.step_time_s < eager.step_time_s
