"""MoE in the simulated step: expert compute, all-to-all placement, skew, capacity, seeds."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import simulate
from simulator.api import resolve
from simulator.compute import gemm_time
from simulator.hardware import Topology
from simulator.workload.layout import group_layout
from simulator.workload.moe.layer import MoECost

SMALL = {"parallelism.pipeline": 1, "parallelism.data": 8, "parallelism.tensor": 1,
         "parallelism.expert": 8, "parallelism.expert_tensor": 1,
         "model.num_layers": 2, "training.global_batch_size": 16,
         "training.micro_batch_size": 1}


def _moe(overrides: dict, topo="dgx-h100") -> tuple[MoECost, Topology]:
    w, t = resolve("mixtral-8x7b", topo, {**SMALL, **overrides})
    top = Topology.from_config(t)
    return MoECost(w, top, group_layout(w, top), w.model.seq_length), top


def test_uniform_dropless_expert_time_is_dense_equivalent():
    cost, topo = _moe({"model.moe.router_load": "uniform", "model.moe.balancing": "none"})
    loads = cost.route(0, 0)
    per_expert = cost.tokens * cost.ep * 2 // 8
    assert np.all(loads.kept_tokens == per_expert)
    gpu = topo.gpu
    ffn = 14336
    dense = (gemm_time(per_expert, 2 * ffn, 4096, gpu, "bf16")
             + gemm_time(per_expert, 4096, ffn, gpu, "bf16") - 2 * gpu.kernel_overhead_s
             + per_expert * ffn * 2 * 3 / (gpu.hbm_bandwidth * gpu.memory_bandwidth_efficiency)
             + 3 * gpu.kernel_overhead_s)  # one kernel per expert GEMM + the activation
    got = cost.expert_seconds(loads.kept_tokens, backward=False)
    assert got == pytest.approx(np.full(8, dense), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("skew", [0.3, 1.0, 2.0])
def test_skew_never_makes_a_step_faster(seed, skew):
    base = {**SMALL, "training.seed": seed, "model.moe.balancing": "none"}
    uniform = simulate("mixtral-8x7b", "dgx-h100",
                       **{**base, "model.moe.router_load": "uniform"})
    skewed = simulate("mixtral-8x7b", "dgx-h100",
                      **{**base, "model.moe.router_load": "skewed",
                         "model.moe.router_skew": skew})
    assert skewed.step_time_s >= uniform.step_time_s
    assert skewed.imbalance["ep_rank_max_over_mean"] >= 1.0


def test_capacity_factor_bounds_the_slowest_rank():
    cost, _ = _moe({"model.moe.router_load": "skewed", "model.moe.router_skew": 2.0,
                    "model.moe.balancing": "none", "model.moe.capacity_factor": 1.0})
    loads = cost.route(0, 0)
    cap = int(1.0 * cost.tokens * cost.ep * 2 / 8)
    assert loads.kept_tokens.max() <= cap
    assert loads.dropped > 0
    worst = cost.expert_seconds(loads.kept_tokens, False).max()
    bound = cost.expert_seconds(np.full(8, cap), False).max()
    assert worst <= bound + 1e-15


def test_ep_inside_nvlink_is_faster_than_across_nodes():
    cost, topo = _moe({"model.moe.router_load": "uniform"})
    inside = cost.part(0, 0, False)
    cost.place = topo.place(8, 8)  # one EP rank per node
    cost._cache.clear()
    across = cost.part(0, 0, False)
    assert cost.place.span > 0
    assert across.exposed_ep > 2 * inside.exposed_ep


def test_seed_changes_only_router_draws():
    skewed = {**SMALL, "model.moe.router_load": "skewed", "model.moe.router_skew": 1.0}
    a = simulate("mixtral-8x7b", "dgx-h100", **{**skewed, "training.seed": 1})
    b = simulate("mixtral-8x7b", "dgx-h100", **{**skewed, "training.seed": 1})
    c = simulate("mixtral-8x7b", "dgx-h100", **{**skewed, "training.seed": 2})
    assert a.to_json() == b.to_json()
    assert a.step_time_s != c.step_time_s
    uni = {**SMALL, "model.moe.router_load": "uniform"}
    d = simulate("mixtral-8x7b", "dgx-h100", **{**uni, "training.seed": 1})
    e = simulate("mixtral-8x7b", "dgx-h100", **{**uni, "training.seed": 2})
    assert d.step_time_s == e.step_time_s


def test_moe_result_reports_ep_comm_and_imbalance():
    r = simulate("mixtral-8x7b", "dgx-h100", **SMALL)
    assert r.exposed_comm_s["ep"] > 0
    for key in ("ep_expert_max_over_mean", "ep_rank_max_over_mean", "ep_dropped_fraction",
                "ep_balance_loss"):
        assert np.isfinite(r.imbalance[key])


def test_fp8_expert_casts_follow_the_gemm_operands_of_each_pass():
    """FP8 (TE GroupedLinear): each 16-bit GEMM operand is read once and written as row- and
    column-wise FP8 (4 B per element): the FC1 / FC2 inputs (h and f wide) in the forward,
    the FC2 / FC1 output gradients (h and 2f wide under SwiGLU) in the backward."""
    over = {"model.moe.router_load": "uniform", "model.moe.balancing": "none"}
    bf16, topo = _moe(over)
    fp8, _ = _moe({**over, "training.precision": "fp8"})
    kept = bf16.route(0, 0).kept_tokens
    gpu = topo.gpu
    bw = gpu.hbm_bandwidth * gpu.memory_bandwidth_efficiency
    n, h, f = float(kept[0]), 4096, 14336

    def gemms(cost, backward):  # GEMM and activation seconds of one expert
        return cost._expert_kernels(kept[:1], backward)[0]
    casts = {b: gemms(fp8, b) - gemms(bf16, b) for b in (False, True)}
    # bf16 and FP8 GEMMs differ in rate; compare the cast parts through a zero-FLOP expert
    zero = np.zeros(1)
    assert fp8._expert_kernels(zero)[0] - bf16._expert_kernels(zero)[0] == pytest.approx(
        2 * gpu.kernel_overhead_s)
    fwd_bytes, bwd_bytes = 4.0 * n * (h + f), 4.0 * n * (h + 2 * f)
    gemm_delta = {b: casts[b] - (fwd_bytes if not b else bwd_bytes / 2) / bw
                  - (2 if not b else 1) * gpu.kernel_overhead_s for b in (False, True)}
    # what is left is the GEMMs' FP8-vs-bf16 difference, the same in both passes
    assert gemm_delta[False] == pytest.approx(gemm_delta[True], rel=1e-9)
