"""Megatron-FSDP (ZeRO-1/2/3 over the data x context ranks): memory and traffic.

Closed forms: ZeRO's per-GPU model states (Rajbhandari et al. 2020, Figure 1: ``2+2+K``
bytes per parameter replicated, the optimizer's ``K`` over ``N_d`` with ZeRO-1, the
gradients too with ZeRO-2, the weights too with ZeRO-3) and the two-stage pipeline of
per-layer gathers and reduce-scatters (simulator/workload/fsdp.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator import ConfigError, simulate
from simulator.api import resolve, simulate_resolved
from simulator.cli.main import main
from simulator.collectives import collective_time
from simulator.compute import memory_time
from simulator.config import load_workload
from simulator.memory import estimate_memory
from simulator.memory.model import fsdp_staged_params, fsdp_unit_bytes
from simulator.shape.params import layer_params, stage_params, stage_tables
from simulator.shape.partition import partition_layers
from simulator.shape.plan_shape import plan_shape
from simulator.workload.fsdp import FSDP_KEYS, pipelined, pipelined_parts, unit_collectives, units

# Llama 3 8B on 16 H100 (two nodes), TP1 PP1 DP16: the DP group crosses the fabric
PLAN = {"parallelism.tensor": 1, "parallelism.data": 16, "parallelism.sequence_parallel": False,
        "training.global_batch_size": 64, "training.recompute": "full"}
STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")


def fsdp(strategy: str | None, **extra) -> dict:
    over = dict(PLAN, **extra)
    if strategy is not None:
        over.update({"training.use_megatron_fsdp": True,
                     "training.data_parallel_sharding_strategy": strategy})
    return over


def test_zero_stages_shard_the_model_states_as_the_zero_paper(h100):
    w0 = load_workload("llama3-8b", fsdp(None))
    n = stage_params(w0, partition_layers(w0), 0).total  # all of the model: TP1 PP1
    d = 16
    # unit staging: the largest unit pair, one decoder layer and the 128,256 x 4,096
    # embedding (or output) table beside it (TP1 PP1: the stage holds both tables)
    layer = layer_params(w0, False).total
    table = 128256 * 4096
    assert fsdp_staged_params(w0, partition_layers(w0), 0) == pytest.approx(layer + table)
    rows = {s: estimate_memory(load_workload("llama3-8b", fsdp(s)), h100).stages[0]
            for s in STRATEGIES}
    states = {s: (st.parameters, st.gradients, st.optimizer) for s, st in rows.items()}
    assert states["no_shard"] == pytest.approx((2 * n, 4 * n, 12 * n))
    assert states["optim"] == pytest.approx((2 * n, 4 * n, 12 * n / d))
    assert states["optim_grads"] == pytest.approx((2 * n, 4 * n / d, 12 * n / d))
    assert states["optim_grads_params"] == pytest.approx((2 * n / d, 4 * n / d, 12 * n / d))
    # Megatron's distributed optimizer is ZeRO-1: the same states as FSDP "optim"
    plain = estimate_memory(w0, h100).stages[0]
    assert (plain.parameters, plain.gradients, plain.optimizer) == pytest.approx(states["optim"])
    # unsharded units: two layers' gradients (ZeRO-2), and two layers' weights (ZeRO-3)
    base = rows["optim"].comm_buffers
    assert rows["optim_grads"].comm_buffers - base == pytest.approx((layer + table) * 4)
    assert rows["optim_grads_params"].comm_buffers - base == pytest.approx(
        (layer + table) * (4 + 2))
    totals = [rows[s].total for s in STRATEGIES]
    assert totals == sorted(totals, reverse=True)


def test_fp8_weights_under_zero3_keep_no_cached_copies(h100):
    w = load_workload("llama3-8b", fsdp("optim_grads_params", **{"training.precision": "fp8"}))
    st = estimate_memory(w, h100).stages[0]
    assert st.fp8_weight_copies == 0.0
    # the gathered unit carries its FP8 cast: 2 + 1 bytes per weight, plus 4 per gradient
    n = stage_params(w, partition_layers(w), 0).total
    assert fsdp_unit_bytes(w, n / 16) == pytest.approx(n / 16 * (2 + 1 + 4))
    z1 = load_workload("llama3-8b", fsdp("optim_grads", **{"training.precision": "fp8"}))
    # TE's copies are of the decoder layers' linears: the embedding and output tables are
    # Megatron-Core modules and keep none
    layers = n - sum(stage_tables(w, partition_layers(w), 0))
    assert estimate_memory(z1, h100).stages[0].fp8_weight_copies == pytest.approx(2 * layers)
    # keep_fp8_transpose_cache: one byte per parameter of the gathered, whole weights
    # (Megatron-FSDP README: "number of parameter x 1 Byte of memory overhead")
    kept = load_workload("llama3-8b", fsdp("optim_grads_params", **{
        "training.precision": "fp8", "training.keep_fp8_transpose_cache": True}))
    assert estimate_memory(kept, h100).stages[0].fp8_weight_copies == pytest.approx(layers)


def test_pipelined_traffic_closed_forms():
    t = np.array([10.0, 1.0, 0.0])  # compute-bound, communication-bound, phase absent
    a, r, n, sl = 0.2, 0.3, 5, 0.1
    got = pipelined(t, n, a, r, sl)
    # compute-bound: only the first gather and the last reduce-scatter show, plus the
    # slowdown of the compute beside all n units' traffic
    assert got[0] == pytest.approx(a + r + sl * n * (a + r))
    # communication-bound: the traffic paces every unit, the last unit's compute shows
    x = 1.0 / n
    assert got[1] == pytest.approx(a + (n - 1) * (a + r) + x + r - 1.0 + sl * 1.0)
    assert got[2] == 0.0
    assert not pipelined(t, n, 0.0, 0.0, sl).any()



def test_an_outer_reduction_on_its_own_link_is_a_third_pipeline_stage():
    """HSDP's outer all-reduce runs on a stream of its own behind the unit's reduce-scatter
    (FSDP1 ``_all_reduce_stream``, Megatron-FSDP ``hsdp_all_reduce_stream``); on a link of its
    own it paces the units only when it is the slowest stage: the flow-shop closed form
    a + (n-1) max(a+r, o, x) + x + r + o."""
    t = np.array([10.0, 1.0, 0.0])
    a, r, o, n, sl = 0.02, 0.03, 0.5, 5, 0.0
    x = t / n
    got = pipelined(t, n, a, r, sl, outer=o)
    # compute-bound (x = 2 > o): only the first gather and the last unit's reductions show
    assert got[0] == pytest.approx(a + r + o)
    # outer-bound (o = 0.5 > x = 0.2 > a + r): the outer link paces every unit
    assert got[1] == pytest.approx(a + (n - 1) * o + x[1] + r + o - 1.0)
    assert got[2] == 0.0
    # in line on one link it costs more, and never less than apart
    serial = pipelined(t, n, a, r + o, sl)
    assert (serial >= got).all() and serial[1] > got[1]
    # no outer reduction: the two-stage form unchanged
    assert pipelined(t, n, a, r, sl, outer=0.0) == pytest.approx(pipelined(t, n, a, r, sl))
    # without prefetch the gathers stay in line, the reductions beside the next unit
    assert pipelined(t, n, a, r, sl, prefetch=0, outer=o)[1] == pytest.approx(
        n * a + (n - 1) * o + x[1] + r + o - 1.0)

def test_unit_collectives_move_one_layer_of_weights_and_gradients():
    w, t = resolve("llama3-8b", "dgx-h100", fsdp("optim_grads_params"))
    _, plan, _ = simulate_resolved(w, t, variability=False)
    shape = plan_shape(w)
    n = units(shape, 0, 0)
    assert n == 32 + 2  # decoder layers, the embedding and the output layer
    gather, reduce, outer = unit_collectives(w, plan.topo, shape, plan.groups, 0, 0)
    assert outer == 0.0  # one optimizer instance: nothing to reduce across instances
    per_unit = shape.params[0].dense / n
    g = plan.groups["dp_cp"]
    assert gather == pytest.approx(collective_time("all_gather", 2 * per_unit, g, plan.topo))
    assert reduce == pytest.approx(collective_time("reduce_scatter", 4 * per_unit, g, plan.topo))
    z2 = resolve("llama3-8b", "dgx-h100", fsdp("optim_grads"))[0]
    assert unit_collectives(z2, plan.topo, shape, plan.groups, 0, 0) == pytest.approx(
        (0.0, reduce, 0.0))


def test_sharded_gradients_move_the_dp_traffic_into_every_micro_batch():
    runs = {s: simulate_resolved(*resolve("llama3-8b", "dgx-h100", fsdp(s)),
                                 variability=False)
            for s in STRATEGIES}
    inp = {s: runs[s][1].engine_input for s in STRATEGIES}
    # DDP buckets at the end of the backward only without sharded gradients
    assert all(any(c) for c in inp["optim"].dp_buckets[0])
    assert not any(c for c in inp["optim_grads"].dp_buckets[0])
    # the optimizer's parameter all-gather: ZeRO-1/2 only (ZeRO-3 gathers on use)
    assert inp["no_shard"].param_gather[0] == 0.0 < inp["optim"].param_gather[0]
    assert inp["optim_grads"].param_gather[0] == inp["optim"].param_gather[0]
    assert inp["optim_grads_params"].param_gather[0] == 0.0
    dp = {s: runs[s][0].exposed_comm_s["dp"] for s in STRATEGIES}
    assert dp["optim"] < dp["optim_grads"] < dp["optim_grads_params"]
    for s in STRATEGIES:  # the parts still sum to the step
        r = runs[s][0]
        assert sum(r.breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    # the phases grew by exactly the exposed FSDP time the breakdown reports
    z3 = runs["optim_grads_params"][1]
    grown = (inp["optim_grads_params"].fwd + inp["optim_grads_params"].bwd).sum() \
        - (inp["optim"].fwd + inp["optim"].bwd).sum()
    assert grown == pytest.approx(z3.totals[0]["dp"])


def test_zero3_fits_a_plan_that_zero1_cannot():
    # Llama 3 70B on 64 H100 without model parallelism: 70B x 2 B of weights alone is
    # more than an H100 holds, unless the weights are sharded too
    over = {"parallelism.tensor": 1, "parallelism.pipeline": 1, "parallelism.data": 64,
            "parallelism.virtual_pipeline": None, "parallelism.pipeline_schedule": "1f1b",
            "parallelism.sequence_parallel": False, "training.global_batch_size": 64,
            "training.recompute": "full", "training.tp_comm_overlap": False}
    assert not simulate("llama3-70b", "dgx-h100", overrides=over).fits_in_memory
    z3 = simulate("llama3-70b", "dgx-h100",
                  overrides={**over, "training.use_megatron_fsdp": True})
    assert z3.fits_in_memory and z3.memory_breakdown_GB["parameters"] < 3


def test_strategy_without_fsdp_and_fsdp_with_precision_aware_optimizer_are_refused():
    with pytest.raises(ConfigError) as exc:
        load_workload("llama3-8b", {"training.data_parallel_sharding_strategy": "optim_grads"})
    assert exc.value.field == "training.data_parallel_sharding_strategy"
    with pytest.raises(ConfigError) as exc:
        load_workload("llama3-8b", {"training.use_megatron_fsdp": True,
                                    "training.use_precision_aware_optimizer": True})
    assert exc.value.field == "training.use_precision_aware_optimizer"
    with pytest.raises(ConfigError) as exc:
        load_workload("llama3-8b", {"training.keep_fp8_transpose_cache": True})
    assert exc.value.field == "training.keep_fp8_transpose_cache"
    w = load_workload("llama3-8b", {"training.use_megatron_fsdp": True})
    assert w.training.sharding == "optim_grads_params"  # Megatron-Core's default
    assert load_workload("llama3-8b").training.sharding == "optim"


def test_cli_names_the_strategy_and_refuses_a_bad_one(capsys):
    assert main(["memory", "llama3-8b", "-t", "dgx-h100", "--set",
                 "training.use_megatron_fsdp=true", "--set",
                 "training.data_parallel_sharding_strategy=optim_grads"]) == 0
    assert "Megatron-FSDP optim_grads" in capsys.readouterr().out
    assert main(["run", "llama3-8b", "-t", "dgx-h100", "--set",
                 "training.use_megatron_fsdp=true", "--set",
                 "training.data_parallel_sharding_strategy=zero3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data_parallel_sharding_strategy" in err[0]
    # another stack's FSDP is named as what it is, with the stack
    assert main(["run", "llama3-8b", "-t", "dgx-h100", "--set", "training.stack=torchtitan",
                 "--set", "training.use_megatron_fsdp=true"]) == 0
    out = capsys.readouterr().out
    assert "FSDP2 optim_grads_params, stack torchtitan" in out and "Megatron-FSDP" not in out


def test_search_tries_megatron_fsdp_layouts_and_reproduces_them():
    from simulator.sweep import search
    from simulator.sweep.candidates import sharding_names

    assert sharding_names(None) == ("",)
    assert sharding_names("all") == ("ddp", "optim_grads", "optim_grads_params")
    assert sharding_names("optim_grads_params, ddp") == ("optim_grads_params", "ddp")
    with pytest.raises(ConfigError) as exc:
        sharding_names("zero3")
    assert exc.value.field == "--sharding"
    # Llama 3 8B on 8 H100, pure DP (the baseline, with the first layout tried): with DDP it
    # needs recompute to fit, with ZeRO-3 the model states split eight ways and it does not
    over = {"training.global_batch_size": 32, "parallelism.sequence_parallel": False}
    kw = dict(overrides=over, micro_batch_sizes=(1,), max_context=1, executor="serial")
    ddp = search("llama3-8b", "dgx-h100", 8, 50, sharding="ddp", **kw)
    both = search("llama3-8b", "dgx-h100", 8, 50, sharding="optim_grads_params,ddp", **kw)
    assert set(ddp.plans["sharding"]) == {"ddp"}
    assert set(both.plans["sharding"]) == {"ddp", "optim_grads_params"}
    assert both.counts["plans"] == 2 * ddp.counts["plans"]
    pure = {r.baselines[0]["plan"]: r.baselines[0] for r in (ddp, both)}
    assert pure["TP1 PP1 DP8 MBS1 DDP"]["recompute"] != "none"
    assert pure["TP1 PP1 DP8 MBS1 FSDP-Z3"]["recompute"] == "none"
    z3 = both.plans[both.plans["sharding"] == "optim_grads_params"].iloc[0]
    assert "FSDP-Z3" in z3["plan"]
    for rank in (1, int(z3["rank"])):
        row = both.plans[both.plans["rank"] == rank].iloc[0]
        again = simulate("llama3-8b", "dgx-h100", overrides=both.overrides_for(rank))
        assert again.step_time_s == pytest.approx(row["step_time_s"], rel=1e-12)


def test_trace_shows_fsdp_traffic_and_does_not_stretch_the_kernels_by_it():
    from simulator.report.figures import simulate_run
    from simulator.report.trace import THREADS, chrome_trace

    over = fsdp("optim_grads_params", **{"training.global_batch_size": 16})
    run = simulate_run("llama3-8b", "dgx-h100", over)
    trace = chrome_trace(run.plan, run.engine, run.result)["traceEvents"]
    dp_tid, cpu_tid = THREADS["dp"][0], THREADS["compute"][0]
    fsdp_slices = [e for e in trace if e.get("ph") == "X" and e["tid"] == dp_tid
                   and e["name"].startswith("FSDP")]
    m = run.plan.workload.num_microbatches
    assert len(fsdp_slices) == 2 * m  # one per forward and per backward phase (PP 1)
    assert all(e["args"]["exposed_us"] > 0 for e in fsdp_slices)
    # kernels of the first forward fill the phase less its FSDP wait, as in the plain plan
    f0 = run.plan.phases[("F", 0, 0)]
    phase = next(e for e in trace if e.get("ph") == "X" and e["tid"] == cpu_tid
                 and e["name"] == "F mb 0")
    end = phase["ts"] + phase["dur"]
    kernels = [e for e in trace if e.get("cat") == "kernel" and e["args"]["microbatch"] == 0
               and e["args"]["phase"] == "F" and phase["ts"] <= e["ts"] < end]
    exposed = run.plan.fsdp_exposed[0][0, 0, 0]
    assert sum(e["dur"] for e in kernels) <= (f0.duration + 1e-9) * 1e6 + 1e-3 * len(kernels)
    assert phase["dur"] == pytest.approx((f0.duration + exposed) * 1e6, abs=1e-2)


def test_fsdp_staging_holds_the_largest_pair_of_units():
    # Llama 3 70B, PP 4: the first stage stages a layer and the embedding, a middle stage
    # two layers, the last a layer and the output table
    w = load_workload("llama3-70b", {"training.use_megatron_fsdp": True})
    part = partition_layers(w)
    layer = layer_params(w, False).total
    table = 129024 * 8192 / 8  # 128,256 tokens padded to a multiple of 128 x TP 8
    assert [fsdp_staged_params(w, part, s) for s in range(4)] == pytest.approx(
        [layer + table, 2 * layer, 2 * layer, layer + table])
    assert table > layer
    # Mixtral 8x7B: every layer routes, so the pair is of MoE layers (experts included)
    m = load_workload("mixtral-8x7b", {"training.use_megatron_fsdp": True})
    mp = partition_layers(m)
    moe = layer_params(m, True).total
    assert moe > layer_params(m, False).total
    assert fsdp_staged_params(m, mp, 1) == pytest.approx(2 * moe)


def test_pipelined_parts_split_the_added_seconds():
    t = np.array([10.0, 1.0, 0.0])
    a, r, n, sl = 0.2, 0.3, 5, 0.1
    exposed, slowed = pipelined_parts(t, n, a, r, sl)
    assert exposed + slowed == pytest.approx(pipelined(t, n, a, r, sl))
    # the slowdown is the compute beside the traffic, never more than the phase's compute
    assert slowed == pytest.approx([sl * n * (a + r), sl * 1.0, 0.0])
    assert exposed[0] == pytest.approx(a + r)  # compute-bound: first gather, last reduce


@pytest.mark.parametrize("stack, extra", [
    ("megatron", {}),
    ("torchtitan", {}),  # FSDP2 copy-in / copy-out kernels on the compute stream
    ("torchtitan", {"parallelism.pipeline": 2, "parallelism.data": 4}),  # once per schedule
    ("megatron", {"training.num_distributed_optimizer_instances": 2}),  # HSDP outer reduce
])
def test_fsdp_breakdown_sums_to_the_fsdp_dp_time(stack, extra):
    over = fsdp("optim_grads_params", **{"training.stack": stack, **extra})
    w, t = resolve("llama3-8b", "dgx-h100", over)
    r, plan, _ = simulate_resolved(w, t, variability=False)
    for s, parts in enumerate(plan.fsdp_breakdown):
        assert set(parts) == set(FSDP_KEYS)
        assert min(parts.values()) >= 0.0
        assert sum(parts.values()) == pytest.approx(plan.totals[s]["dp"])
    assert r.fsdp_breakdown_s == plan.fsdp_breakdown[r.critical_stage]
    assert sum(r.fsdp_breakdown_s.values()) <= r.breakdown_s["dp"] * (1 + 1e-9)
    if stack == "megatron":  # Megatron-FSDP's flat buffers: no copy kernels
        assert r.fsdp_breakdown_s["copy_kernels"] == 0.0
    else:
        assert r.fsdp_breakdown_s["copy_kernels"] > 0.0


def test_fsdp_copy_kernels_are_hbm_traffic_per_gathered_and_reduced_parameter():
    """torchtitan, one stage, every micro-batch gathers twice (reshard after forward) and
    reduces once: copy-out 4 B per gathered bf16 weight each time, copy-in 6 B per gradient,
    at the GPU's stream bandwidth (simulator.compute.memory_time)."""
    over = fsdp("optim_grads_params", **{"training.stack": "torchtitan"})
    w, t = resolve("llama3-8b", "dgx-h100", over)
    r, plan, _ = simulate_resolved(w, t, variability=False)
    sp = plan.shape.params[0]
    n, gpu = sp.dense + sp.expert, plan.topo.gpu
    per_mb = 2 * memory_time(4.0 * n, gpu) + memory_time(6.0 * n, gpu)
    expect = w.num_microbatches * per_mb
    assert r.fsdp_breakdown_s["copy_kernels"] == pytest.approx(expect, rel=1e-6)


def test_no_fsdp_breakdown_without_sharded_gradients():
    r = simulate("llama3-8b", "dgx-h100")
    assert r.fsdp_breakdown_s == {}


def test_run_prints_the_fsdp_split(capsys):
    over = fsdp("optim_grads_params", **{"training.stack": "torchtitan"})
    argv = ["run", "llama3-8b", "-t", "dgx-h100"]
    for key, value in over.items():
        argv += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "FSDP (bottleneck stage, whole step; part of the exposed dp time):" in out
    for label in ("collectives exposed", "copy kernels", "overlap slowdown"):
        assert label in out
    # without sharded gradients there is no FSDP section
    assert main(["run", "llama3-8b", "-t", "dgx-h100"]) == 0
    assert "FSDP (" not in capsys.readouterr().out
