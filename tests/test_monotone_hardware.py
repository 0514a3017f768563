"""Property: more bandwidth or less latency anywhere in the topology never lengthens a step.

Every fabric and NVLink tier constant (bandwidth, NVLS bus bandwidth, ring / all-to-all /
DeepEP efficiencies, the size curve's half-bandwidth point, oversubscription, per-step
latency) and the GPU's HBM and host-link bandwidths and launch latencies are moved one
at a time in the faster direction, and all at once by random factors (hypothesis), on
shipped workloads and topologies with plans that exercise TP / EP / PP / CP, DualPipe-V,
recompute (full, MoE-only), CUDA graphs, host-bound MoE layers, DeepEP under group-limited
routing, an FSDP2 stack that keeps its gathered weights, and FSDP2 under PyTorch's pipelining
(gradients reduce-scattered once per schedule; lock-step slots as in torch 2.8). The step
(expected and ideal) must not grow.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.api import resolve, simulate_resolved
from simulator.config import load_topology

TOL = 1e-9  # relative: float summation order only

# (workload, topology, workload overrides)
CASES = [
    ("llama3-70b", "dgx-h100", {}),
    ("llama3-70b", "gb200-nvl72", {}),
    ("llama3-405b", "gb300-nvl72", {}),
    ("mixtral-8x7b", "dgx-h100", {}),
    ("deepseek-v3", "gb200-nvl72", {}),
    ("deepseek-v3", "dgx-h100", {"training.recompute": "selective"}),
    ("deepseek-v3", "gb200-nvl72", {"training.cuda_graph_impl": "transformer_engine",
                                    "training.cuda_graph_scope": ["attn", "moe_router",
                                                                  "moe_preprocess"]}),
    ("llama3-8b", "dgx-h100", {"parallelism.context": 2, "model.seq_length": 16384,
                               "parallelism.data": 4}),
    ("deepseek-v3", "dgx-h100", {"parallelism.pipeline_schedule": "dualpipe_v",
                                 "parallelism.virtual_pipeline": None,
                                 "parallelism.pipeline_model_parallel_layout": None}),
    ("deepseek-v3", "gb300-nvl72", {"training.recompute": "selective",
                                    "training.recompute_modules": ["moe"]}),
    # DeepEP under group-limited routing; an FSDP2 stack that keeps the forward's weights
    ("mixtral-8x7b", "dgx-h100", {"model.moe.token_dispatcher_type": "flex",
                                  "model.moe.router_num_groups": 4,
                                  "model.moe.router_group_topk": 1}),
    ("llama3-8b", "dgx-h100", {"training.stack": "torchtitan", "training.use_megatron_fsdp": True,
                               "training.stack_settings": {"fsdp.reshard_after_forward": False}}),
    ("llama3-8b", "dgx-h100", {"training.stack": "torchtitan", "training.use_megatron_fsdp": True,
                               "parallelism.pipeline": 2, "parallelism.data": 2,
                               "training.global_batch_size": 16}),
    # HSDP with one instance per node: the outer all-reduce on the NICs beside the in-node
    # reduce-scatter (a third pipeline stage, simulator/workload/fsdp.py)
    ("llama3-8b", "dgx-h100", {"training.stack": "fsdp1", "training.use_megatron_fsdp": True,
                               "parallelism.tensor": 1, "parallelism.data": 16,
                               "training.num_distributed_optimizer_instances": 2,
                               "training.global_batch_size": 16}),
    # PyTorch 2.8's lock-step pipeline slots (AutoModel 2025 release: pipeline.lockstep)
    ("llama3-8b", "dgx-h100", {"training.stack": "nemo-automodel",
                               "training.stack_release": "AutoModel 2025-10",
                               "training.use_megatron_fsdp": True, "parallelism.pipeline": 2,
                               "parallelism.virtual_pipeline": 2,
                               "parallelism.pipeline_schedule": "interleaved",
                               "parallelism.data": 2, "training.global_batch_size": 16}),
]

UP = ("bandwidth_GBps", "nvls_busbw_GBps", "efficiency", "alltoall_efficiency",
      "deepep_efficiency", "ll_busbw_GBps")
DOWN = ("latency_us", "base_latency_us", "half_bandwidth_MB", "oversubscription")
GPU_UP = ("hbm_bandwidth_TBps", "host_link_GBps", "memory_bandwidth_efficiency")
GPU_DOWN = ("host_launch_us", "kernel_overhead_us")
CAPPED = {"efficiency": 1.0, "alltoall_efficiency": 1.0, "deepep_efficiency": 1.0,
          "memory_bandwidth_efficiency": 1.0}
FLOOR = {"oversubscription": 1.0}


def faster(name: str, value: float, factor: float) -> float:
    """``value`` moved by ``factor`` (> 1) in the direction that makes hardware faster."""
    key = name.rsplit(".", 1)[-1]
    if key in UP or key in GPU_UP:
        return min(value * factor, CAPPED.get(key, float("inf")))
    return max(value / factor, FLOOR.get(key, 0.0))


def knobs(topology: str) -> dict[str, float]:
    """Every link / memory / latency constant the topology sets, by dotted path."""
    cfg = load_topology(topology)
    out = {}
    for i, tier in enumerate(cfg.tiers):
        for key in UP + DOWN:
            value = getattr(tier, key, None)
            if value:
                out[f"tiers.{i}.{key}"] = float(value)
    for key in GPU_UP + GPU_DOWN:
        value = getattr(cfg.gpu, key, None)
        if value:
            out[f"gpu.{key}"] = float(value)
    return out


def steps(case, topo_overrides=None) -> tuple[float, float]:
    wl, topo, over = case
    w, t = resolve(wl, topo, over, topo_overrides or {})
    expected = simulate_resolved(w, t)[0].step_time_s
    ideal = simulate_resolved(w, t, variability=False)[0].step_time_s
    return expected, ideal


_BASE: dict[int, tuple[float, float]] = {}


def base(i: int) -> tuple[float, float]:
    if i not in _BASE:
        _BASE[i] = steps(CASES[i])
    return _BASE[i]


def _params():
    for i, case in enumerate(CASES):
        for name in knobs(case[1]):
            yield pytest.param(i, name, id=f"{case[0]}-{case[1]}-{i}-{name}")


@pytest.mark.parametrize(("i", "name"), list(_params()))
def test_one_constant_faster_never_slower(i, name):
    value = knobs(CASES[i][1])[name]
    b_exp, b_ideal = base(i)
    for factor in (1.5,):
        new = faster(name, value, factor)
        if new == value:
            continue
        exp, ideal = steps(CASES[i], {name: new})
        assert exp <= b_exp * (1 + TOL), f"{name} x{factor}: expected {b_exp:.4f} -> {exp:.4f} s"
        assert ideal <= b_ideal * (1 + TOL), f"{name} x{factor}: ideal {b_ideal:.4f} -> " \
                                             f"{ideal:.4f} s"


@settings(max_examples=10, deadline=None, derandomize=True)
@given(i=st.integers(0, len(CASES) - 1),
       factors=st.lists(st.floats(1.0, 3.0), min_size=30, max_size=30))
def test_all_constants_faster_together_never_slower(i, factors):
    names = sorted(knobs(CASES[i][1]))
    values = knobs(CASES[i][1])
    over = {n: faster(n, values[n], f) for n, f in zip(names, factors, strict=False)}
    b_exp, b_ideal = base(i)
    exp, ideal = steps(CASES[i], over)
    assert exp <= b_exp * (1 + TOL), over
    assert ideal <= b_ideal * (1 + TOL), over


def test_the_knobs_reach_every_tier_and_the_gpu():
    # the property is only as strong as its coverage: NVLink and fabric tiers and the GPU
    names = knobs("gb200-nvl72")
    assert {"tiers.0.bandwidth_GBps", "tiers.0.latency_us", "tiers.0.nvls_busbw_GBps",
            "tiers.0.base_latency_us", "tiers.0.ll_busbw_GBps",
            "tiers.1.bandwidth_GBps", "tiers.1.latency_us", "gpu.hbm_bandwidth_TBps",
            "gpu.host_launch_us"} <= set(names)
