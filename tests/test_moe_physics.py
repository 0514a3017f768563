"""MoE physics (issue 12): closed forms, properties, dispatchers, MLA/MTP, bad input.

Closed forms: DeepSeek-V3 parameter counts, all-to-all volumes with and without
node-limited routing, permute bytes. Properties: more overlap is never slower; a
host-bound MoE layer is never faster than its kernel launches.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.api import simulate
from simulator.compute import memory_time
from simulator.config import load_topology, load_workload
from simulator.config.workload import MoEConfig, Workload
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.moe import alltoall_bytes, rng_for, route
from simulator.shape.model_params import model_params
from simulator.workload.chunk_cost import ChunkCoster
from simulator.workload.layout import group_layout
from simulator.workload.moe.host import BACKWARD_FACTOR

H100 = Topology.from_config(load_topology("dgx-h100"))


def _tiny_moe(**moe) -> dict:
    return {"model": {"name": "m", "num_layers": 4, "hidden_size": 1024,
                      "num_attention_heads": 8, "ffn_hidden_size": 2048,
                      "gated_linear_unit": True, "vocab_size": 32000, "seq_length": 2048,
                      "moe": {"num_experts": 64, "router_topk": 8, "ffn_hidden_size": 512}
                      | moe},
            "parallelism": {"data": 16, "expert": 16},
            "training": {"global_batch_size": 64}}


def test_deepseek_v3_parameter_counts_closed_form():
    h, a, layers, moe_layers, v = 7168, 128, 61, 58, 129280
    mla = (h * 1536 + 1536 + 1536 * a * 192 + h * (512 + 64) + 512 + 512 * a * 256
           + a * 128 * h)
    expert = 3 * h * 2048
    norms = 4 * h
    moe_total = mla + norms + h * 256 + expert * (256 + 1)
    moe_active = mla + norms + h * 256 + expert * (8 + 1)
    dense = mla + norms + 3 * h * 18432
    emb = 2 * v * h + h
    p = model_params(load_workload("deepseek-v3"))
    assert p.total == 3 * dense + moe_layers * moe_total + emb
    assert p.active == 3 * dense + moe_layers * moe_active + emb
    assert layers - moe_layers == 3
    assert abs(p.total / 671e9 - 1) < 0.01  # DeepSeek-AI 2024: 671B (MTP apart)
    assert abs(p.active / 37e9 - 1) < 0.016  # "37B" activated: 37.55B with both vocab tables
    assert p.mtp == pytest.approx(moe_total + 2 * h + 2 * h * h)  # one MoE layer + eh_proj


def test_dense_model_active_equals_total():
    p = model_params(load_workload("llama3-8b"))
    assert p.total == p.active and p.mtp == 0


def test_alltoall_volume_flat_and_node_limited_closed_form():
    ep, T, k, h, E = 64, 1000, 8, 7168, 256
    loads = route(MoEConfig(num_experts=E, router_topk=k), T * ep, rng_for(0, 0, 0))
    send, recv = alltoall_bytes(loads, ep, T, h)
    assert send == pytest.approx(np.full(ep, T * k * h * (ep - 1) / ep))
    assert recv == pytest.approx(send)
    # hierarchical, 8 GPUs per node -> 8 nodes; a token's 8 picks hit
    # 8 * (1 - (7/8)^8) = 5.25 nodes unlimited, 4 with max_nodes_per_token 4.
    nodes, rpn = 8, 8
    hits = nodes * (1 - (1 - 1 / nodes) ** k)
    intra = T * k * h * (rpn - 1) / ep
    s_free, _ = alltoall_bytes(loads, ep, T, h, rpn)
    s_lim, _ = alltoall_bytes(loads, ep, T, h, rpn, max_nodes_per_token=4)
    assert s_free == pytest.approx(np.full(ep, intra + T * h * hits * (nodes - 1) / nodes))
    assert s_lim == pytest.approx(np.full(ep, intra + T * h * 4 * (nodes - 1) / nodes))
    assert (s_lim < s_free).all()


def test_permute_bytes_closed_form():
    w = Workload.model_validate(_tiny_moe())
    bld = ChunkCoster(w, H100)
    router, permute = bld.moe._local()
    T, k, h = bld.moe.tokens, 8, 1024
    assert permute == pytest.approx(2 * memory_time((1 + k) * T * h * 2, H100.gpu))
    assert router > 0


def _step(spec: dict, topo: str = "dgx-h100") -> float:
    return simulate(spec, topo).step_time_s


@pytest.mark.parametrize("flag", ["overlap_moe_expert_parallel_comm", "shared_expert_overlap"])
def test_more_overlap_never_slower(flag):
    base = _tiny_moe(shared_expert_ffn_hidden_size=1024)
    base["parallelism"] = {"data": 32, "expert": 32}
    on = _tiny_moe(shared_expert_ffn_hidden_size=1024, **{flag: True})
    on["parallelism"] = base["parallelism"]
    r_off, r_on = simulate(base, "dgx-h100"), simulate(on, "dgx-h100")
    assert r_on.step_time_s <= r_off.step_time_s
    assert r_on.ep_breakdown_s["hidden"] > 0 and r_off.ep_breakdown_s["hidden"] == 0


def test_host_bound_layer_never_faster_than_its_launches():
    w = Workload.model_validate(_tiny_moe())
    topo = Topology.from_config(load_topology("dgx-h100", {"gpu.host_launch_us": 500.0}))
    bld = ChunkCoster(w, topo)
    n = bld.moe.launches
    fwd_launch = (n.attention + n.router + n.preprocess + n.dispatch_combine + n.experts + 2)
    launch = topo.gpu.host_launch_s * fwd_launch
    f, b = bld.moe.part(0, 0, False), bld.moe.part(0, 0, True)
    assert bld.moe_base[0].duration + f.duration >= launch * (1 - 1e-12)
    assert bld.moe_base[1].duration + b.duration >= BACKWARD_FACTOR * launch * (1 - 1e-12)
    r = simulate(_tiny_moe(), "dgx-h100", topology_overrides={"gpu.host_launch_us": 500.0})
    assert r.host_bound_fraction > 0.3 and any("host launch-bound" in x for x in r.notes)
    assert sum(r.breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-9)


def test_cuda_graphs_cut_host_time():
    eager = _tiny_moe()
    graphed = _tiny_moe()
    graphed["training"] = {"global_batch_size": 64, "cuda_graph_impl": "transformer_engine",
                           "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"]}
    full = _tiny_moe()
    full["training"] = {"global_batch_size": 64, "cuda_graph_impl": "full_iteration"}
    t = [_step(s) for s in (eager, graphed, full)]
    assert t[0] >= t[1] >= t[2]


def test_dispatchers_cost_differently_and_report_breakdown():
    out = {}
    for kind in ("alltoall", "allgather", "flex"):
        for k in (2, 8):
            spec = _tiny_moe(token_dispatcher_type=kind, router_topk=k)
            spec["parallelism"] = {"data": 32, "expert": 32}
            r = simulate(spec, "dgx-h100")
            out[kind, k] = r.ep_breakdown_s["dispatch"]
            assert set(r.ep_breakdown_s) >= {"dispatch", "combine", "permute", "router",
                                             "expert_gemm", "exposed", "hidden"}
            assert r.model_params_total > r.model_params_active > 0
    # all-gather moves every token to every rank whatever the routing; the all-to-all
    # dispatchers move one copy per assignment (flex: per remote node), so top-k matters.
    assert out["allgather", 2] == pytest.approx(out["allgather", 8])
    assert out["alltoall", 8] > out["alltoall", 2]
    assert out["flex", 8] > out["flex", 2]
    assert out["flex", 8] != out["alltoall", 8]


def test_node_limited_routing_lowers_flex_dispatch_time():
    spec = _tiny_moe(token_dispatcher_type="flex")
    spec["parallelism"] = {"data": 64, "expert": 64}
    free = simulate(spec, "dgx-h100").ep_breakdown_s["dispatch"]
    spec["model"]["moe"]["max_nodes_per_token"] = 2
    limited = simulate(spec, "dgx-h100").ep_breakdown_s["dispatch"]
    assert limited < free


def test_rank_order_places_ep_peers():
    w = load_workload("mixtral-8x7b")
    assert group_layout(w, H100)["ep"].span == 0  # default: EP inside one NVLink domain
    spread = w.model_copy(update={"parallelism": w.parallelism.model_copy(
        update={"rank_order": "tp-cp-dp-ep-pp"})})
    assert group_layout(spread, H100)["ep"].span > 0


def test_mla_changes_attention_flops_and_params():
    spec = load_workload("deepseek-v3").model_dump()
    mha = dict(spec)
    mha["model"] = {**spec["model"], "multi_latent_attention": False, "num_query_groups": 128}
    assert model_params(Workload.model_validate(spec)).total \
        < model_params(Workload.model_validate(mha)).total


def test_bad_input_one_line_config_errors():
    spec = _tiny_moe(enable_deepep=True, token_dispatcher_type="flex")
    spec["parallelism"] = {"data": 16, "expert": 1}
    with pytest.raises(ConfigError) as e:
        load_workload(spec)
    assert "model.moe.enable_deepep" in str(e.value) and "\n" not in str(e.value)
    spec = _tiny_moe()
    spec["model"]["multi_latent_attention"] = True
    spec["model"]["kv_lora_rank"] = 512
    with pytest.raises(ConfigError) as e:
        load_workload(spec)
    assert "model.qk_head_dim" in str(e.value)
    with pytest.raises(ConfigError):
        load_workload(_tiny_moe(enable_deepep=True))  # DeepEP is the flex dispatcher


def test_uniform_routing_costs_once_and_matches_per_layer_draws():
    w = Workload.model_validate(_tiny_moe())
    bld = ChunkCoster(w, H100)
    a = bld.moe.part(0, 0, False)
    loads = bld.moe.route(3, 5)
    assert np.array_equal(loads.kept_tokens, a.loads.kept_tokens)
    assert math.isfinite(a.duration) and len(bld.moe.draws()) == 1
