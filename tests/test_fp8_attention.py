"""FP8 attention (``training.fp8_dot_product_attention``): cuDNN's FP8 / MXFP8 SDPA rates over
BF16 from NVIDIA's cudnn-frontend benchmark (simulator/compute/fp8_attention.py), and the
sliding-window backward that does not skip the band's masked tiles."""

from __future__ import annotations

import pytest

from simulator.api import resolve
from simulator.compute import fp8_attention as F
from simulator.compute.attention import kernel_efficiency
from simulator.config import load_topology
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.workload.cost import CostContext, op_time
from simulator.workload.ops import backward_of, layer_forward


def _gpu(name):
    return Topology.from_config(load_topology(name)).gpu


def _attn_ops(workload, topo, **training):
    """(the topology, the forward and backward attention ops of one layer, by name)."""
    over = {f"training.{k}": v for k, v in training.items()}
    w, t = resolve(workload, topo, over)
    fwd = [o for o in layer_forward(w) if o.kind == "attn"]
    bwd = [o for o in backward_of(fwd) if o.kind == "attn"]
    return Topology.from_config(t), {o.name: o for o in fwd + bwd}


@pytest.mark.parametrize("topo,table", [("gb300-nvl72", "gb300"), ("gb200-nvl72", "gb200"),
                                        ("dgx-b200", "gb200"), ("dgx-h100", "h200")])
def test_speed_is_the_benchmark_ratio_at_a_measured_length(topo, table):
    gpu = _gpu(topo)
    assert F.table_of(gpu) == table
    source = F.CUDNN_H200_919 if table == "h200" else F.CUDNN_922
    s, bf_f, bf_b, f8_f, f8_b = source[(table, 128, "causal")][1][:5]
    assert s == 4096
    fwd, bwd = F.speed("delayed", gpu, 4096, 128, True)
    assert fwd == pytest.approx(bf_f / f8_f) and bwd == pytest.approx(bf_b / f8_b)


def test_recipes_map_to_the_benchmark_columns_and_mxfp8_is_slower_than_fp8():
    gpu = _gpu("gb300-nvl72")
    for recipe in ("delayed", "tensorwise", "blockwise"):
        assert F.speed(recipe, gpu, 8192, 128, True) == F.speed("delayed", gpu, 8192, 128, True)
    fp8, mx = F.speed("tensorwise", gpu, 8192, 128, True), F.speed("mxfp8", gpu, 8192, 128, True)
    assert mx[0] < fp8[0] and mx[1] < fp8[1]
    # MLA (head dim 192) gains more than head dim 128 (the dsv3 against the llama3.1 points)
    mla, mha = F.speed("mxfp8", gpu, 4096, 192, True), F.speed("mxfp8", gpu, 4096, 128, True)
    assert mla[1] > 1.25 > mha[1]


def test_interpolation_is_between_neighbours_and_held_at_the_ends():
    gpu = _gpu("gb300-nvl72")
    lo, hi = F.speed("mxfp8", gpu, 4096, 128, True), F.speed("mxfp8", gpu, 8192, 128, True)
    mid = F.speed("mxfp8", gpu, 5793, 128, True)
    for i in range(2):
        assert min(lo[i], hi[i]) <= mid[i] <= max(lo[i], hi[i])
    assert F.speed("mxfp8", gpu, 512, 128, True) == F.speed("mxfp8", gpu, 2048, 128, True)
    assert F.speed("mxfp8", gpu, 1 << 20, 128, True) == F.speed("mxfp8", gpu, 16384, 128, True)


def test_gpus_without_a_benchmark_run_fp8_attention_at_the_bf16_rate():
    gpu = _gpu("mi300x")
    assert F.table_of(gpu) is None
    assert F.speed("delayed", gpu, 4096, 128, True) == (1.0, 1.0)


def test_hopper_fp8_causal_backward_is_slower_than_bf16_past_4k():
    """cuDNN 9.19 on H200: the FP8 causal backward runs most of the masked square."""
    gpu = _gpu("dgx-h100")
    assert F.speed("delayed", gpu, 4096, 128, True)[1] == pytest.approx(1.0, abs=0.02)
    assert F.speed("delayed", gpu, 16384, 128, True)[1] < 0.7
    assert F.speed("delayed", gpu, 16384, 128, True)[0] > 1.4


@pytest.mark.parametrize("topo", ["gb200-nvl72", "gb300-nvl72"])
@pytest.mark.parametrize("recipe,col", [("delayed", 4), ("mxfp8", 6)])
def test_window_backward_as_the_causal_triangle_matches_the_benchmark(topo, recipe, col):
    """The gpt_oss points (batch 2, 128 heads, head dim 64, window 128): an FP8 window
    backward costed as the FP8 causal backward over the whole sequence is within 20 % of the
    measured time at 4K-8K and within 45 % at 2K-16K (the BF16 causal curve's tile fill at head
    dim 64 is the larger part of the misfit), and 2-30x the BF16 window backward."""
    gpu = _gpu(topo)
    peak = gpu.peak_flops["bf16"]
    for s, _, bf_b, *fp8_cols in F.CUDNN_922[(F.table_of(gpu), "window", "causal")]:
        measured = fp8_cols[col - 3] * 1e-3
        flops = 2.5 * 4.0 * 2 * s * s * 128 * 64 / 2
        eff = kernel_efficiency("te", gpu, s, 64, True) * F.pass_speed(
            (F.benchmark_recipe(recipe), "bwd", s), gpu, 64, True)
        predicted = flops / (eff * peak)
        tol = 0.20 if s in (4096, 8192) else 0.45
        assert predicted == pytest.approx(measured, rel=tol), s
        assert 2.0 < measured / (bf_b * 1e-3) < 30.0


@pytest.mark.parametrize("workload", ["tiny", "deepseek-v3"])
def test_fp8_attention_in_a_layer_runs_at_the_kernel_rates(workload):
    """Each attention op of a layer (head dim 64-128, and MLA's 192) is its BF16 time over
    the benchmark speed of its pass, at its sequence and head dim."""
    kw = {"precision": "fp8", "fp8_recipe": "mxfp8"}
    topo, base = _attn_ops(workload, "gb300-nvl72", **kw)
    _, fp8 = _attn_ops(workload, "gb300-nvl72", fp8_dot_product_attention=True, **kw)
    ctx = CostContext(topo, {}, "fp8", False)
    assert set(fp8) == set(base) == {"attention", "attention_bwd"}
    op = fp8["attention"]
    fwd, bwd = F.speed("mxfp8", topo.gpu, op.attn[1], op.attn[2], True)
    launch = topo.gpu.kernel_overhead_s  # each kernel's fixed launch cost is not scaled

    def kernel(o):
        return op_time(o, ctx) - launch
    assert kernel(base["attention"]) / kernel(op) == pytest.approx(fwd)
    assert kernel(base["attention_bwd"]) / kernel(fp8["attention_bwd"]) == pytest.approx(bwd)
    assert fp8["attention_bwd"].flops == base["attention_bwd"].flops


def test_windowed_layers_pay_the_triangle_in_the_backward_only():
    over = {"model.window_size": 128, "model.window_attn_skip_freq": 2,
            "model.seq_length": 4096}
    w0, t = resolve("llama3-8b", "gb300-nvl72", {**over, "training.precision": "fp8",
                                                 "training.fp8_recipe": "mxfp8"})
    w1, _ = resolve("llama3-8b", "gb300-nvl72", {**over, "training.precision": "fp8",
                                                 "training.fp8_recipe": "mxfp8",
                                                 "training.fp8_dot_product_attention": True})
    ctx = CostContext(Topology.from_config(t), {}, "fp8", False)

    def times(w):
        fwd = [o for o in layer_forward(w) if o.kind == "attn"]
        bwd = [o for o in backward_of(fwd) if o.kind == "attn"]
        return {o.name: op_time(o, ctx) for o in fwd + bwd}, {o.name: o for o in fwd + bwd}
    t0, _ = times(w0)
    t1, ops = times(w1)
    assert t1["attention_window"] < t0["attention_window"]  # the forward skips the band
    assert t1["attention_window_bwd"] > 2 * t0["attention_window_bwd"]
    # the window backward is the causal kernel over the whole sequence, for its share
    full, win = ops["attention_bwd"], ops["attention_window_bwd"]
    assert win.attn == full.attn and win.flops == pytest.approx(full.flops)


def test_fp8_attention_needs_fp8_precision():
    with pytest.raises(ConfigError, match="fp8_dot_product_attention"):
        resolve("tiny", "gb300-nvl72", {"training.fp8_dot_product_attention": True})


def test_context_parallel_blocks_take_their_fp8_speeds():
    """A CP ring's attention under FP8 runs at the FP8 speeds of its blocks; the hidden
    KV exchange is unchanged, so the layer's critical path shrinks where the kernel gains."""
    from simulator.workload.context import RingKernels, block_efficiency, block_work
    gpu = _gpu("gb300-nvl72")
    work = block_work(4, True)
    bf16 = block_efficiency(work, RingKernels("te", 8192, 192), gpu, True)
    fwd = block_efficiency(work, RingKernels("te", 8192, 192, fp8="mxfp8"), gpu, True)
    bwd = block_efficiency(work, RingKernels("te", 8192, 192, fp8="mxfp8"), gpu, True, True)
    diag = work == 0.5
    assert (fwd[diag] / bf16[diag]) == pytest.approx(F.speed("mxfp8", gpu, 8192, 192, True)[0])
    assert (bwd[~diag & (work > 0)] / bf16[~diag & (work > 0)]) == pytest.approx(
        F.speed("mxfp8", gpu, 4096, 192, False)[1])
    over = {"parallelism.context": 2, "model.seq_length": 16384,
            "training.precision": "fp8", "training.fp8_recipe": "tensorwise"}
    from simulator.api import simulate
    base = simulate("llama3-8b", "gb300-nvl72", overrides=over)
    fp8 = simulate("llama3-8b", "gb300-nvl72",
                   overrides={**over, "training.fp8_dot_product_attention": True})
    assert fp8.step_time_s < base.step_time_s
    assert fp8.breakdown_s["cp"] == pytest.approx(base.breakdown_s["cp"],
                                                  abs=0.02 * base.step_time_s)


@pytest.mark.parametrize("recipe,out_saved_fp8", [("mxfp8", False), ("delayed", True)])
def test_fp8_attention_keeps_fp8_copies_for_its_backward(recipe, out_saved_fp8):
    """TE's FusedAttnFunc saves the FP8 Q, K, V it ran with (and the FP8 output under delayed
    scaling) instead of their 16-bit tensors: 1 byte less per element."""
    from simulator.memory.activations import activation_bytes_per_layer
    base = {"training.precision": "fp8", "training.fp8_recipe": recipe}
    w0, _ = resolve("llama3-8b", "gb300-nvl72", base)
    w1, _ = resolve("llama3-8b", "gb300-nvl72",
                    {**base, "training.fp8_dot_product_attention": True})
    m, t = w0.model, w0.parallelism.tensor
    tokens = m.seq_length * w0.training.micro_batch_size / w0.parallelism.context
    qd, kvd = m.num_attention_heads * m.head_dim, m.groups * m.head_dim
    saved = tokens * (qd + 2 * kvd + (qd if out_saved_fp8 else 0)) / t
    assert activation_bytes_per_layer(w0) - activation_bytes_per_layer(w1) == pytest.approx(saved)
