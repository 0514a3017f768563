"""Megatron-Core's partial distributed optimizer (num_distributed_optimizer_instances) and
Megatron-FSDP's HSDP / HFSDP: memory and traffic against their closed forms.

With k instances the DP x CP ranks split into k groups of consecutive ranks. A state that
is sharded is sharded over DP*CP/k ranks and held k times; a gradient bucket of S bytes is
reduce-scattered inside an instance, then its S/(DP*CP/k) shard all-reduced over the k
instances (Megatron-Core param_and_grad_buffer.py start_grad_sync).
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator import ConfigError, simulate
from simulator.api import resolve, simulate_resolved
from simulator.cli.main import main
from simulator.collectives import collective_time
from simulator.config import load_workload
from simulator.memory import estimate_memory
from simulator.shape.params import stage_params
from simulator.shape.partition import partition_layers
from simulator.shape.plan_shape import plan_shape
from simulator.workload.fsdp import unit_collectives
from simulator.workload.layout import group_layout
from simulator.workload.step_input import buckets_of, grad_comm_bytes

# Llama 3 8B, TP1 PP1 DP32 on 32 H100 (four nodes): the DP group crosses the fabric
PLAN = {"parallelism.tensor": 1, "parallelism.data": 32, "parallelism.sequence_parallel": False,
        "training.global_batch_size": 128, "training.recompute": "full"}
D = 32


def plan(k: int, **extra) -> dict:
    return {**PLAN, "training.num_distributed_optimizer_instances": k, **extra}


def fsdp(k: int, outer: str = "no_shard") -> dict:
    return plan(k, **{"training.use_megatron_fsdp": True,
                      "training.outer_dp_sharding_strategy": outer})


def test_instances_replicate_the_optimizer_state_k_times(h100):
    w1 = load_workload("llama3-8b", plan(1))
    n = stage_params(w1, partition_layers(w1), 0).total  # the whole model: TP1 PP1
    for k in (1, 2, 4, 8):
        st = estimate_memory(load_workload("llama3-8b", plan(k)), h100).stages[0]
        # ZeRO-1 inside an instance: 12 B of fp32 state per parameter over D/k ranks
        assert st.optimizer == pytest.approx(12 * n / (D // k))
        assert (st.parameters, st.gradients) == pytest.approx((2 * n, 4 * n))
    # k = D: one rank per instance, the plain (replicated) Adam states
    k32 = estimate_memory(load_workload("llama3-8b", plan(D)), h100).stages[0]
    plain = estimate_memory(load_workload("llama3-8b", {
        **PLAN, "training.distributed_optimizer": False}), h100).stages[0]
    assert k32.optimizer == pytest.approx(plain.optimizer)


def test_hsdp_shards_inside_an_instance_and_hfsdp_shards_the_optimizer_over_all(h100):
    w = load_workload("llama3-8b", plan(1))
    n = stage_params(w, partition_layers(w), 0).total
    hsdp = estimate_memory(load_workload("llama3-8b", fsdp(4)), h100).stages[0]
    assert (hsdp.parameters, hsdp.gradients, hsdp.optimizer) == pytest.approx(
        (2 * n / 8, 4 * n / 8, 12 * n / 8))
    hfsdp = estimate_memory(load_workload("llama3-8b", fsdp(4, "optim")), h100).stages[0]
    assert (hfsdp.parameters, hfsdp.gradients, hfsdp.optimizer) == pytest.approx(
        (2 * n / 8, 4 * n / 8, 12 * n / D))


def test_groups_split_the_data_parallel_ranks_into_consecutive_instances(h100):
    w = load_workload("llama3-8b", plan(4))
    g = group_layout(w, h100)
    assert (g["dp_cp_intra"].size, g["dp_cp_inter"].size) == (8, 4)
    assert g["dp_cp_inter"].stride == g["dp_cp_intra"].stride * 8
    one = group_layout(load_workload("llama3-8b", plan(1)), h100)
    assert one["dp_cp_intra"] == one["dp_cp"] and one["dp_cp_inter"].size == 1


def test_a_bucket_is_a_reduce_scatter_inside_then_an_all_reduce_across(h100):
    w = load_workload("llama3-8b", plan(4))
    g = group_layout(w, h100)
    params = 40e6
    s = params * grad_comm_bytes(w)
    (t, nbytes), = buckets_of(params, 32, g["dp_cp_intra"], h100, True, grad_comm_bytes(w),
                              True, g["dp_cp_inter"])
    assert nbytes == s
    assert t == pytest.approx(collective_time("reduce_scatter", s, g["dp_cp_intra"], h100)
                              + collective_time("all_reduce", s / 8, g["dp_cp_inter"], h100))
    # one instance: the reduce-scatter over all DP ranks, nothing across
    one = group_layout(load_workload("llama3-8b", plan(1)), h100)
    (t1, _), = buckets_of(params, 32, one["dp_cp_intra"], h100, True, grad_comm_bytes(w),
                          True, one["dp_cp_inter"])
    assert t1 == pytest.approx(collective_time("reduce_scatter", s, one["dp_cp"], h100))


def test_engine_input_uses_the_instance_groups():
    r1, p1, _ = simulate_resolved(*resolve("llama3-8b", "dgx-h100", plan(1)), variability=False)
    r4, p4, _ = simulate_resolved(*resolve("llama3-8b", "dgx-h100", plan(4)), variability=False)
    wb = 2  # bf16 weights
    n = p4.stage_params[0].dense
    assert p4.engine_input.param_gather[0] == pytest.approx(
        collective_time("all_gather", n * wb, p4.groups["dp_cp_intra"], p4.topo))
    assert p1.engine_input.param_gather[0] == pytest.approx(
        collective_time("all_gather", n * wb, p1.groups["dp_cp"], p1.topo))
    # the optimizer step updates 4x the parameters per GPU
    assert p4.engine_input.optimizer[0] > 3 * p1.engine_input.optimizer[0]
    assert r4.memory_per_gpu_GB > r1.memory_per_gpu_GB
    for r in (r1, r4):
        assert sum(r.breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-9)


def test_hsdp_reduces_across_instances_on_the_last_micro_batch_only():
    _, p4, _ = simulate_resolved(*resolve("llama3-8b", "dgx-h100", fsdp(4)), variability=False)
    shape = plan_shape(p4.workload)
    outer = unit_collectives(p4.workload, p4.topo, shape, p4.groups, 0, 0)[2]
    assert outer > 0
    units = 32 + 2
    shard = stage_params(p4.workload, shape.partition, 0).dense / units \
        * grad_comm_bytes(p4.workload) / 8
    assert outer == pytest.approx(collective_time("all_reduce", shard,
                                                  p4.groups["dp_cp_inter"], p4.topo))
    # the extra outer reduction shows in the last micro-batch's backward and no other
    bwd = p4.engine_input.bwd[0, 0]
    assert np.allclose(bwd[:-1], bwd[0]) and bwd[-1] > bwd[0]
    hf = simulate_resolved(*resolve("llama3-8b", "dgx-h100", fsdp(4, "optim")),
                           variability=False)[1]
    _, _, outer_rs = unit_collectives(hf.workload, hf.topo, shape, hf.groups, 0, 0)
    assert outer_rs == pytest.approx(collective_time("reduce_scatter", shard,
                                                     hf.groups["dp_cp_inter"], hf.topo))
    # HFSDP gathers the instances' shards once per step after the optimizer
    assert hf.engine_input.param_gather[0] > 0 == p4.engine_input.param_gather[0]



def test_hsdp_outer_reduction_overlaps_the_next_reduce_scatter_when_the_instance_is_one_node():
    """An instance inside one NVLink node reduce-scatters there while the outer all-reduce
    crosses the fabric: two links, two streams, so the last backward is paced by the slower
    one (simulator/workload/fsdp.py). An instance spanning nodes shares the NIC: in line."""
    from simulator.workload.fsdp import add_fsdp_traffic, outer_apart, pipelined
    from simulator.workload.fsdp import units as fsdp_units
    over = {**fsdp(4), "training.data_parallel_sharding_strategy": "optim_grads_params"}
    _, p4, _ = simulate_resolved(*resolve("llama3-8b", "dgx-h100", over), variability=False)
    assert outer_apart(p4.groups)  # 8 ranks per instance: one node each
    shape = plan_shape(p4.workload)
    a, r, o = unit_collectives(p4.workload, p4.topo, shape, p4.groups, 0, 0)
    n, sl = fsdp_units(shape, 0, 0), p4.topo.gpu.comm_overlap_slowdown
    # a backward short enough that the outer all-reduce is the slowest stage
    x = 0.5 * o
    assert o > max(a + r, x)
    fwd, bwd = np.full((1, 1, 3), n * x / 2), np.full((1, 1, 3), n * x)
    add_fsdp_traffic(p4.workload, p4.topo, shape, p4.groups, fwd, bwd, None)
    t = np.array([n * x])
    assert bwd[0, 0, 0] == pytest.approx(t[0] + pipelined(t, n, a, r, sl)[0])
    last = pipelined(t, n, a, r, sl, outer=o)[0]
    assert bwd[0, 0, -1] == pytest.approx(t[0] + last)
    assert last == pytest.approx(a + (n - 1) * o + x + r + o - t[0] + sl * t[0])
    assert last < pipelined(t, n, a, r + o, sl)[0]  # in line would cost more
    # two instances of 16 ranks: each spans two nodes and shares their NICs, in line
    _, p2, _ = simulate_resolved(*resolve("llama3-8b", "dgx-h100", {
        **over, "training.num_distributed_optimizer_instances": 2}), variability=False)
    assert not outer_apart(p2.groups)
    a2, r2, o2 = unit_collectives(p2.workload, p2.topo, shape, p2.groups, 0, 0)
    fwd, bwd = np.full((1, 1, 3), n * x / 2), np.full((1, 1, 3), n * x)
    add_fsdp_traffic(p2.workload, p2.topo, shape, p2.groups, fwd, bwd, None)
    assert bwd[0, 0, -1] == pytest.approx(t[0] + pipelined(t, n, a2, r2 + o2, sl)[0])
    # eight GPUs, two instances of four: both reductions on the node's NVLink, in line
    _, p8, _ = simulate_resolved(*resolve("llama3-8b", "dgx-h100", {
        **over, "parallelism.data": 8, "training.global_batch_size": 64,
        "training.num_distributed_optimizer_instances": 2}), variability=False)
    assert p8.groups["dp_cp_intra"].span == 0 and not outer_apart(p8.groups)


@pytest.mark.parametrize("over, field", [
    (plan(3), "training.num_distributed_optimizer_instances"),  # 3 does not divide 32
    (plan(2, **{"training.distributed_optimizer": False}),
     "training.num_distributed_optimizer_instances"),
    ({**PLAN, "training.outer_dp_sharding_strategy": "optim"},
     "training.outer_dp_sharding_strategy"),
    ({**fsdp(4, "optim"), "training.data_parallel_sharding_strategy": "optim_grads"},
     "training.outer_dp_sharding_strategy"),
])
def test_impossible_layouts_are_refused_naming_the_field(over, field):
    with pytest.raises(ConfigError) as exc:
        load_workload("llama3-8b", over)
    assert exc.value.field == field


def test_moe_instances_must_divide_expert_data_parallel(h100):
    # Mixtral 8x7B as shipped: DP 8, TP 2, EP 8, so expert-DP = 8 x 2 / 8 = 2; four
    # instances divide the 8 DP ranks but not the 2 expert-DP ranks
    with pytest.raises(ConfigError) as exc:
        load_workload("mixtral-8x7b", {"training.num_distributed_optimizer_instances": 4})
    assert "expert-data-parallel size (2)" in exc.value.allowed
    two = load_workload("mixtral-8x7b", {"training.num_distributed_optimizer_instances": 2})
    g = group_layout(two, h100)
    assert (g["edp_intra"].size, g["edp_inter"].size) == (1, 2)
    st = estimate_memory(two, h100).stages[0]
    one = estimate_memory(load_workload("mixtral-8x7b"), h100).stages[0]
    assert st.optimizer > one.optimizer  # dense and expert states both held twice


def _sets(over: dict) -> list[str]:
    return [arg for k, v in over.items() for arg in ("--set", f"{k}={v}")]


def test_cli_names_the_instances(capsys):
    assert main(["run", "llama3-8b", "-t", "dgx-h100", *_sets(plan(4))]) == 0
    assert "distributed optimizer in 4 instances" in capsys.readouterr().out
    assert main(["memory", "llama3-8b", "-t", "dgx-h100", *_sets(fsdp(4))]) == 0
    assert "(HSDP)" in capsys.readouterr().out
    r = simulate("llama3-8b", "dgx-h100", overrides=plan(4))
    assert r.to_dict()["plan"]["optimizer_instances"] == 4


def test_search_tries_optimizer_instances_and_reproduces_them():
    from simulator.sweep import search
    from simulator.sweep.candidates import Shape, sharding_names

    assert sharding_names("ddp,ddp/4,optim_grads_params/8") == (
        "ddp", "ddp/4", "optim_grads_params/8")
    for bad in ("ddp/0", "ddp/x", "zero3/2"):
        with pytest.raises(ConfigError) as exc:
            sharding_names(bad)
        assert exc.value.field == "--sharding"
    shape = Shape(1, 1, 1, 1, 1, 32, 1, False, "1f1b", "optim_grads_params/4")
    assert shape.label().endswith("FSDP-Z3/4")
    assert shape.overrides()["training.num_distributed_optimizer_instances"] == 4
    # Llama 3 8B on 32 H100: every shape is tried with one and with four instances; a
    # shape whose DP x CP four does not divide is invalid, not simulated
    over = {"training.global_batch_size": 128, "training.recompute": "full"}
    kw = dict(overrides=over, micro_batch_sizes=(1,), max_context=1, executor="serial")
    one = search("llama3-8b", "dgx-h100", 32, 200, sharding="ddp", **kw)
    both = search("llama3-8b", "dgx-h100", 32, 200, sharding="ddp,ddp/4", **kw)
    assert both.counts["plans"] == 2 * one.counts["plans"]
    assert both.counts["invalid"] > 2 * one.counts["invalid"]  # DP 1 and 2 cannot split in 4
    assert set(both.plans["sharding"]) == {"ddp", "ddp/4"}
    four = both.plans[both.plans["sharding"] == "ddp/4"]
    assert all(p.endswith("DDP/4") for p in four["plan"])
    for rank in (1, int(four.iloc[0]["rank"])):
        row = both.plans[both.plans["rank"] == rank].iloc[0]
        again = simulate("llama3-8b", "dgx-h100", overrides=both.overrides_for(rank))
        assert again.step_time_s == pytest.approx(row["step_time_s"], rel=1e-12)
        assert again.memory_per_gpu_GB == pytest.approx(row["memory_per_gpu_GB"], rel=1e-12)


def test_trace_names_the_reduction_across_instances():
    from simulator.report.figures import simulate_run
    from simulator.report.trace import THREADS, chrome_trace

    run = simulate_run("llama3-8b", "dgx-h100", plan(4))
    trace = chrome_trace(run.plan, run.engine, run.result)["traceEvents"]
    grads = [e for e in trace if e.get("ph") == "X" and e["tid"] == THREADS["dp"][0]
             and e["name"].startswith("grad ")]
    assert grads and all(e["name"].endswith("+ all-reduce across 4 instances") for e in grads)


def test_ddp_bucket_size_sets_the_bucket_count(h100):
    """Megatron-Core --ddp-bucket-size: a chunk of P parameters makes ceil(P / size) equal
    buckets; unset, max(40e6, 1e6 x dp) (here 40e6 at DP 32); below one weight matrix refused."""
    w = load_workload("llama3-8b", plan(1))
    g = group_layout(w, h100)
    args = (g["dp_cp_intra"], h100, True, grad_comm_bytes(w), True, g["dp_cp_inter"])
    assert len(buckets_of(1e9, D, *args)) == 25
    big = buckets_of(1e9, D, *args, bucket_size=768e6)
    assert len(big) == 2 and big[0][1] == pytest.approx(5e8 * grad_comm_bytes(w))
    w2 = load_workload("llama3-8b", plan(1, **{"training.ddp_bucket_size": 768_000_000}))
    assert w2.training.ddp_bucket_size == 768_000_000
    with pytest.raises(ConfigError, match="ddp_bucket_size"):
        load_workload("llama3-8b", plan(1, **{"training.ddp_bucket_size": 200}))
