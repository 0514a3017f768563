"""Software-stack profiles (stacks/*.yaml, training.stack): sourced data, and the kernels
and overlaps each one changes: attention family, FSDP rules, FP8 casts, eager kernels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator import ConfigError, simulate
from simulator.api import resolve, simulate_resolved
from simulator.cli.main import main
from simulator.collectives import collective_time
from simulator.compute import memory_time
from simulator.compute.attention import arch, head_factor, kernel_efficiency, tile_fill
from simulator.config import load_topology
from simulator.config.stacks import (
    load_stack,
    parse,
    run_stack,
    stack_names,
    with_recipe,
    with_release,
)
from simulator.hardware import Topology
from simulator.memory import model as memory_model
from simulator.memory.model import fsdp_staged_params
from simulator.shape.params import layer_params
from simulator.shape.plan_shape import plan_shape
from simulator.workload import fp8
from simulator.workload.context import RingKernels, ring_attention
from simulator.workload.fsdp import copy_kernels, pipelined, unit_collectives, units
from simulator.workload.ops import backward_of, layer_forward, output_forward, recompute_ops

FSDP = {"parallelism.tensor": 1, "parallelism.data": 16, "parallelism.sequence_parallel": False,
        "training.global_batch_size": 64, "training.use_megatron_fsdp": True,
        "training.data_parallel_sharding_strategy": "optim_grads_params"}


def test_every_shipped_profile_loads_and_names_its_sources():
    names = stack_names()
    assert {"megatron", "torchtitan", "deepspeed", "composer", "nemo-automodel"} <= set(names)
    for n in names:
        assert load_stack(n).name == n
    with pytest.raises(ConfigError, match="with a source"):
        parse("bad", {"fsdp": {"prefetch_depth": 2}})
    with pytest.raises(ConfigError, match=r"attention.family"):
        parse("bad", {"attention": {"family": {"value": "xformers", "source": "x"}}})


def test_profiles_ship_as_package_data(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from simulator.config import loader, stacks
    root = Path(__file__).resolve().parents[1]
    pkg = tmp_path / "simulator" / "shipped" / "stacks"
    pkg.mkdir(parents=True)
    (pkg / "torchtitan.yaml").write_text((root / "stacks" / "torchtitan.yaml").read_text())
    monkeypatch.setattr(loader, "REPO_ROOT", tmp_path / "no-checkout")
    monkeypatch.setattr(loader, "INSTALLED_ROOT", tmp_path / "simulator" / "shipped")
    stacks.load_stack.cache_clear()
    stacks.stack_recipes.cache_clear()
    try:
        assert stacks.load_stack("torchtitan").fsdp_impl == "fsdp2"
        assert stack_names() == ["torchtitan"]
        assert main(["list", "stacks"]) == 0
        assert "torchtitan" in capsys.readouterr().out
    finally:
        stacks.load_stack.cache_clear()
        stacks.stack_recipes.cache_clear()
    assert "stacks" in (root / "setup.py").read_text() and "graft stacks" in (
        root / "MANIFEST.in").read_text()


def test_unknown_stack_is_a_one_line_error(capsys):
    with pytest.raises(ConfigError, match=r"training.stack.*torchtitan"):
        simulate("llama3-8b", "dgx-h100", {"training.stack": "nope"})
    assert main(["run", "llama3-8b", "-t", "dgx-h100", "--set", "training.stack=nope"]) == 2
    err = capsys.readouterr().err
    assert "training.stack" in err and "Traceback" not in err


def test_megatron_profile_is_todays_behaviour():
    base = simulate("llama3-8b", "dgx-h100", variability=False)
    same = simulate("llama3-8b", "dgx-h100", {"training.stack": "megatron"}, variability=False)
    assert same.step_time_s == base.step_time_s
    other = simulate("llama3-8b", "dgx-h100", {"training.stack": "torchtitan"},
                     variability=False)
    assert other.step_time_s > base.step_time_s  # FA2-class SDPA is slower than TE's


def test_attention_efficiency_by_family_and_shape(h100):
    assert arch(h100.gpu) == "hopper"
    # TE on Hopper: the cuDNN kernel's saturated rate times Hopper's tile fill
    for s in (512, 2048, 8192, 1 << 20):
        assert kernel_efficiency("te", h100.gpu, s, 128, True) == pytest.approx(
            h100.gpu.attention_efficiency * tile_fill(s / 2, True))
    # a fitted TE constant (A100) holds from the fit set's shortest sequence (2K causal) up
    a100 = Topology.from_config(load_topology("dgx-a100")).gpu
    for s in (2048, 8192, 1 << 20):
        assert kernel_efficiency("te", a100, s, 128, True) == a100.attention_efficiency
    short = kernel_efficiency("te", a100, 512, 128, True)
    assert short == pytest.approx(a100.attention_efficiency * tile_fill(256, True)
                                  / tile_fill(1024, True))
    # FA2 on H100: the measured 35 % of peak times tile fill and head dim
    fa2 = kernel_efficiency("fa2", h100.gpu, 16384, 128, True)
    assert fa2 == pytest.approx(0.35 * 8192 / (8192 + 512))
    assert kernel_efficiency("fa2", h100.gpu, 16384, 64, True) == pytest.approx(
        fa2 * head_factor(64)) and head_factor(128) == 1.0
    assert kernel_efficiency("fa2", h100.gpu, 4096, 128, False) > kernel_efficiency(
        "fa2", h100.gpu, 4096, 128, True)  # masked diagonal blocks fill tiles worse
    effs = [kernel_efficiency("fa3", h100.gpu, s, 128, True) for s in (512, 2048, 8192)]
    assert effs == sorted(effs)


def test_ring_steps_pay_block_kernels_and_merges(h100):
    place = h100.place(4, 1)
    full, kv = 4.0 * 1 * 65536**2 * 32 * 128, 2.0 * 16384 * 8 * 128 * 2
    base = ring_attention(full, 4, kv, True, h100, place, False)
    te = ring_attention(full, 4, kv, True, h100, place, False, RingKernels("te", 16384, 128))
    # 16K-key blocks on Hopper: the kernel's rate at its tile fill (diagonal 8K causal,
    # off-diagonal zigzag halves 8K unmasked), a little under the saturated figure
    assert base.compute < te.compute < base.compute / tile_fill(8192, True)
    small = ring_attention(full / 1024, 4, kv / 32, True, h100, place, False,
                           RingKernels("te", 512, 128))
    plain = ring_attention(full / 1024, 4, kv / 32, True, h100, place, False)
    assert small.compute > plain.compute  # 256-key half blocks fill tiles worse
    merge = 1e8
    merged = ring_attention(full, 4, kv, True, h100, place, False,
                            RingKernels("te", 16384, 128, merge_fwd_bytes=merge))
    # zigzag: every rank works at every step; three merges after the first step
    assert merged.compute - te.compute == pytest.approx(3 * memory_time(merge, h100.gpu))


def test_no_prefetch_puts_every_gather_in_line():
    t, n, a, r, sl = np.array([1.0]), 4, 0.05, 0.03, 0.1
    got = pipelined(t, n, a, r, sl, prefetch=0)[0]
    x = t[0] / n
    assert got == pytest.approx(n * a + (n - 1) * max(r, x) + x + r - 1.0 + sl * n * r)
    assert got > pipelined(t, n, a, r, sl)[0]


def test_fsdp2_reduces_fp32_and_gathers_float8():
    w, t = resolve("llama3-8b", "dgx-h100", dict(FSDP, **{"training.stack": "torchtitan",
                                                        "training.precision": "fp8"}))
    _, plan, _ = simulate_resolved(w, t, variability=False)
    shape = plan_shape(w)
    n = units(shape, 0, 0)
    gather, reduce, _ = unit_collectives(w, plan.topo, shape, plan.groups, 0, 0)
    per_unit = shape.params[0].dense / n
    g = plan.groups["dp_cp"]
    assert gather == pytest.approx(collective_time("all_gather", 1 * per_unit, g, plan.topo))
    assert reduce == pytest.approx(collective_time("reduce_scatter", 4 * per_unit, g,
                                                   plan.topo))
    ds = resolve("llama3-8b", "dgx-h100", dict(FSDP, **{"training.stack": "deepspeed"}))[0]
    assert units(plan_shape(ds), 0, 0, load_stack("deepspeed").fsdp_units_per_layer) \
        == 32 * 4 + 2  # ZeRO-3 fetches per submodule


def test_fsdp_memory_follows_prefetch_and_resharding(monkeypatch):
    w = resolve("llama3-8b", "dgx-h100", FSDP)[0]
    part = plan_shape(w).partition
    layer = layer_params(w, False).total
    assert fsdp_staged_params(w, part, 0) == pytest.approx(layer + max(
        layer, *memory_model.stage_tables(w, part, 0)))
    keep = dataclasses.replace(load_stack("megatron"), reshard_after_forward=False)
    monkeypatch.setattr(memory_model, "run_stack", lambda training: keep)
    held = fsdp_staged_params(w, part, 0)
    assert held == pytest.approx(32 * layer + sum(memory_model.stage_tables(w, part, 0)))


def test_torchao_casts_and_eager_kernels_move_more_bytes():
    te = resolve("llama3-8b", "dgx-h100", {"training.precision": "fp8"})[0]
    tt = resolve("llama3-8b", "dgx-h100", {"training.precision": "fp8",
                                           "training.stack": "torchtitan"})[0]
    op = next(o for o in layer_forward(te) if o.name == "attn_proj")
    t_, n_, k_ = op.shape
    mine = fp8.cast_op(op, te.training.precision_type.casts, 32, False,
                       load_stack("torchtitan"))
    # 7 B per input element and 2 B per weight in all; the column-major copies (2 B) are
    # made by the backward's GEMMs, so they sit in the backward op
    assert mine.nbytes == pytest.approx(5.0 * t_ * k_)
    assert mine.bwd_nbytes == pytest.approx(7.0 * t_ * n_ + 2.0 * t_ * k_ + 2.0 * n_ * k_)
    casts = {o.name: o.nbytes for o in layer_forward(tt) if o.name.endswith(fp8.SUFFIX)}
    base = {o.name: o.nbytes for o in layer_forward(te) if o.name.endswith(fp8.SUFFIX)}
    assert casts.keys() == base.keys() and all(casts[k] > base[k] for k in casts)
    eager = resolve("llama3-8b", "dgx-h100", {"training.stack": "fsdp1"})[0]
    norm = {o.name: o.nbytes for o in layer_forward(eager)}
    fused = {o.name: o.nbytes for o in layer_forward(resolve("llama3-8b", "dgx-h100")[0])}
    assert norm["input_layernorm"] == pytest.approx(9.0 * fused["input_layernorm"])
    assert norm["residual"] == fused["residual"]


def test_torchao_rowwise_casts_more_gathers_bf16_and_rescales_the_backward():
    """torchao's rowwise recipe on the torchtitan profile (its recipes.rowwise): 8 B per input
    and output-gradient element, 10 B per weight every micro-batch, 5 B of them in the
    backward, 4 B per element of each backward GEMM's output for the rescale after cuBLAS's
    unscaled GEMM, and weights gathered in bf16. Between bf16 and tensorwise on one plan."""
    tw, rw = load_stack("torchtitan", None, "tensorwise"), load_stack("torchtitan", None,
                                                                      "rowwise")
    assert tw == load_stack("torchtitan") and tw.float8_all_gather
    assert not rw.float8_all_gather and rw.fp8_backward_rescale_bytes == 4.0
    te = resolve("llama3-8b", "dgx-h100", {"training.precision": "fp8"})[0]
    op = next(o for o in layer_forward(te) if o.name == "fc2")
    t_, n_, k_ = op.shape
    cast = fp8.cast_op(op, te.training.precision_type.casts, 4, False, rw)
    assert cast.nbytes == pytest.approx(3.0 * t_ * k_ + 5.0 * n_ * k_)
    assert cast.bwd_nbytes == pytest.approx(8.0 * t_ * n_ + 5.0 * (t_ * k_ + n_ * k_)
                                            + 4.0 * (t_ * k_ + n_ * k_))
    over = dict(FSDP, **{"training.stack": "torchtitan", "training.precision": "fp8",
                         "training.torch_compile": True})
    steps = {}
    for recipe in ("tensorwise", "rowwise"):
        w, t = resolve("llama3-8b", "dgx-h100", dict(over, **{"training.fp8_recipe": recipe}))
        assert run_stack(w.training) == (tw if recipe == "tensorwise" else rw)
        steps[recipe] = simulate_resolved(w, t, variability=False)[0].step_time_s
    w, t = resolve("llama3-8b", "dgx-h100", dict(over, **{"training.precision": "bf16"}))
    bf16 = simulate_resolved(w, t, variability=False)[0].step_time_s
    assert bf16 > steps["rowwise"] > steps["tensorwise"]


def test_an_fp8_run_reads_its_stack_profile_from_disk_once(monkeypatch):
    # every FP8 run asks which recipes its stack prices, several times a simulation: the
    # profile is parsed once per process, not per question (a YAML parse is ~20 ms)
    from simulator.config import stacks
    reads = []
    real = stacks._doc
    monkeypatch.setattr(stacks, "_doc", lambda name: reads.append(name) or real(name))
    stacks.load_stack.cache_clear()
    stacks.stack_recipes.cache_clear()
    try:
        for _ in range(2):
            simulate("llama3-8b", "dgx-h100", {"training.precision": "fp8",
                                               "training.stack": "torchtitan"})
        assert 0 < len(reads) <= 2 and set(reads) == {"torchtitan"}, reads
    finally:
        stacks.load_stack.cache_clear()
        stacks.stack_recipes.cache_clear()


def test_a_recipe_only_one_stack_prices_is_one_line_and_exit_2(capsys):
    with pytest.raises(ConfigError, match=r"training\.fp8_recipe.*torchtitan"):
        resolve("llama3-8b", "dgx-h100", {"training.precision": "fp8",
                                          "training.fp8_recipe": "rowwise"})
    rc = main(["run", "llama3-8b", "-t", "dgx-h100", "--set", "training.precision=fp8",
               "--set", "training.fp8_recipe=rowwise"])
    err = capsys.readouterr().err
    assert rc == 2 and "training.fp8_recipe" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    # a bf16 run names the recipe without using it: no error
    resolve("llama3-8b", "dgx-h100", {"training.fp8_recipe": "rowwise"})
    with pytest.raises(ConfigError, match=r"recipes\.x"):
        with_recipe("bad", {"recipes": {"x": {"value": {"fsdp.reduce_dtype": "bf16"}}}}, "x")
    with pytest.raises(ConfigError, match=r"section\.key"):
        with_recipe("bad", {"recipes": {"x": {"value": {"nosuch": 1}, "source": "s"}}}, "y")


def test_rotary_backward_moves_its_forward_bytes_fused_or_eager():
    """The RoPE backward is the same rotation by the negated angle (one pass of the forward's
    bytes, TE fused_rope_backward), not a norm's twice; an eager stack scales both passes by
    its factor (Hugging Face's rotate-half RoPE in the model dtype: 20 B against 4)."""
    for stack, factor in (("megatron", 1.0), ("nemo-automodel", 5.0)):
        w = resolve("llama3-8b", "dgx-h100", {"training.stack": stack})[0]
        fwd = layer_forward(w)
        rope = next(o for o in fwd if o.name == "rotary")
        bwd = next(o for o in backward_of(fwd) if o.name == "rotary_bwd")
        # the shipped plan, TP 2: 16 query and 4 key heads of 128 per GPU over 8,192 tokens
        assert w.parallelism.tensor == 2 and w.model.seq_length == 8192
        assert rope.nbytes == pytest.approx(factor * 2 * 8192 * (16 + 4) * 128 * 2)
        assert bwd.nbytes == pytest.approx(rope.nbytes)
        norm = next(o for o in backward_of(fwd) if o.name == "input_layernorm_bwd")
        assert norm.nbytes == pytest.approx(2 * next(o.nbytes for o in fwd
                                                     if o.name == "input_layernorm"))
    assert load_stack("nemo-automodel").elementwise["rotary"] == 5.0


def _logits(stack: str, precision: str):
    w, t = resolve("llama3-8b", "dgx-h100", {"training.precision": precision,
                                             "training.stack": stack})
    op = next(o for o in output_forward(w) if o.name == "logits")
    _, plan, _ = simulate_resolved(w, t, keep_records=True, variability=False)
    timed = next(o for o in plan.phases[("F", 0, 0)].ops if o.name == "logits")
    return op, timed.duration


def test_torchtitan_and_megatron_keep_the_output_layer_in_bf16_under_fp8():
    tt_op, tt_fp8 = _logits("torchtitan", "fp8")
    _, tt_bf16 = _logits("torchtitan", "bf16")
    mg_op, mg_fp8 = _logits("megatron", "fp8")
    un_op, un_fp8 = _logits("fsdp1", "fp8")  # a profile that leaves output_layer_fp8 unset
    assert tt_op.dtype == "bf16" and mg_op.dtype == "bf16" and un_op.dtype is None
    assert load_stack("torchtitan").fp8_output_layer is False
    assert load_stack("megatron").fp8_output_layer is False  # GPTModel's ColumnParallelLinear
    assert load_stack("fsdp1").fp8_output_layer is None
    # the bf16 logits GEMM costs what the bf16 run's does; unset, it runs at the FP8 rate
    assert tt_fp8 == pytest.approx(tt_bf16) and mg_fp8 == pytest.approx(tt_bf16)
    assert un_fp8 < 0.8 * tt_fp8
    with pytest.raises(ConfigError, match="output_layer_fp8"):
        parse("bad", {"fp8": {"output_layer_fp8": {"value": "no", "source": "x"}}})


def test_float8_all_gather_copies_out_one_byte_per_parameter():
    over = dict(FSDP, **{"training.stack": "torchtitan"})
    times = {}
    for prec in ("bf16", "fp8"):
        w, t = resolve("llama3-8b", "dgx-h100", dict(over, **{"training.precision": prec}))
        _, plan, _ = simulate_resolved(w, t, variability=False)
        times[prec] = copy_kernels(w, plan.topo, plan_shape(w), 0, 0, load_stack("torchtitan"))
    gpu = resolve("llama3-8b", "dgx-h100")[1]
    overhead = memory_time(1.0, Topology.from_config(gpu).gpu) - memory_time(
        0.0, Topology.from_config(gpu).gpu)
    fwd_bf16, fwd_fp8 = (times[p][0] - overhead for p in ("bf16", "fp8"))
    assert fwd_fp8 == pytest.approx(0.5 * fwd_bf16, rel=1e-6)
    # the backward's copy-in of the fp32-reduced gradients does not shrink with FP8
    assert times["fp8"][1] > 0.5 * times["bf16"][1]


def test_torchao_backward_copies_are_not_recomputed():
    over = {"training.precision": "fp8", "training.stack": "torchtitan",
            "training.recompute": "full"}
    w = resolve("llama3-8b", "dgx-h100", over)[0]
    fwd = layer_forward(w)
    rec = {o.name: o for o in recompute_ops(w, fwd)}
    bwd = {o.name: o for o in backward_of(fwd)}
    te = resolve("llama3-8b", "dgx-h100", {"training.precision": "fp8",
                                           "training.recompute": "full"})[0]
    te_fwd = layer_forward(te)
    te_rec = {o.name: o for o in recompute_ops(te, te_fwd)}
    for op in (o for o in fwd if o.name.endswith(fp8.SUFFIX)):
        gemm_op = next(o for o in fwd if o.name + fp8.SUFFIX == op.name)
        t_, n_, k_ = gemm_op.shape
        # the recompute re-runs amax + cast only (5 B per input element, no weight copy)
        assert rec[op.name + "_recompute"].nbytes == pytest.approx(5.0 * t_ * k_)
        assert bwd[op.name + "_bwd"].nbytes == pytest.approx(
            7.0 * t_ * n_ + 2.0 * (t_ * k_ + n_ * k_))
    # Transformer Engine's fused cast-transpose writes both layouts in the forward: its
    # recompute repeats all of them
    for op in (o for o in te_fwd if o.name.endswith(fp8.SUFFIX)):
        assert te_rec[op.name + "_recompute"].nbytes == op.nbytes
    with pytest.raises(ConfigError, match="backward_transpose_bytes"):
        parse("bad", {"fp8": {"input_bytes": {"value": 4.0, "source": "x"},
                              "weight_bytes": {"value": 1.0, "source": "x"},
                              "backward_transpose_bytes": {"value": 2.0, "source": "x"}}})


def test_a_release_carries_the_values_it_had():
    # AutoModel's FSDP2 default reduce dtype was bf16 until 6ec67a855 (2026-05-14)
    now, then = load_stack("nemo-automodel"), load_stack("nemo-automodel", "AutoModel 2026-04")
    assert (now.reduce_dtype, now.fsdp_reduce_copy_bytes_per_param) == ("fp32", 6.0)
    assert (then.reduce_dtype, then.fsdp_reduce_copy_bytes_per_param) == ("bf16", 4.0)
    assert load_stack("nemo-automodel", "AutoModel 2026-06") == now  # no entry: the profile
    w = resolve("llama3-8b", "dgx-h100", dict(FSDP, **{
        "training.stack": "nemo-automodel", "training.stack_release": "AutoModel 2026-04"}))[0]
    assert run_stack(w.training).reduce_dtype == "bf16"
    with pytest.raises(ConfigError, match=r"releases.x"):
        with_release("bad", {"releases": {"x": {"value": {"fsdp.reduce_dtype": "bf16"}}}}, "x")
    with pytest.raises(ConfigError, match=r"section.key"):
        with_release("bad", {"releases": {"x": {"value": {"nosuch": 1}, "source": "s"}}}, "x")


def test_run_settings_pick_attention_and_compiled_kernels():
    base = {"training.stack": "nemo-automodel"}
    eager = resolve("llama3-8b", "dgx-h100", base)[0]
    compiled = resolve("llama3-8b", "dgx-h100", dict(base, **{"training.torch_compile": True}))[0]
    fused = {o.name: o.nbytes for o in layer_forward(resolve("llama3-8b", "dgx-h100")[0])}
    e = {o.name: o.nbytes for o in layer_forward(eager)}
    c = {o.name: o.nbytes for o in layer_forward(compiled)}
    assert e["input_layernorm"] == pytest.approx(9.0 * fused["input_layernorm"])
    assert c == pytest.approx(fused)  # torch.compile: one pass per elementwise op
    assert run_stack(eager.training).cp_merge_overlapped  # TE's CP: merges overlapped
    sdpa = resolve("llama3-8b", "dgx-h100", dict(base, **{"training.attention_family": "fa2"}))[0]
    st = run_stack(sdpa.training)
    assert st.attention_family == "fa2" and not st.cp_merge_overlapped  # PyTorch's CP ring
    assert simulate("llama3-8b", "dgx-h100", dict(base, **{"training.attention_family": "fa2"}),
                    variability=False).step_time_s > simulate(
        "llama3-8b", "dgx-h100", base, variability=False).step_time_s  # FA2 < TE on H100
    with pytest.raises(ConfigError, match="attention_family"):
        resolve("llama3-8b", "dgx-h100", {"training.attention_family": "xformers"})


def test_deepspeed_pipeline_sends_block_the_sender():
    from simulator.workload.blocking_p2p import p2p_seconds, rendezvous_seconds
    plan_over = {"parallelism.pipeline": 4, "parallelism.tensor": 2, "parallelism.data": 1,
                 "training.global_batch_size": 16, "training.use_flash_attn": False}
    runs = {}
    for name in ("megatron", "deepspeed"):  # the sends alone: the engine's factor set to 1
        own = {"training.stack_settings": {"efficiency.pipeline_engine": 1.0}} \
            if name == "deepspeed" else {}
        w, t = resolve("llama3-8b", "dgx-h100", dict(plan_over, **{"training.stack": name},
                                                      **own))
        runs[name] = simulate_resolved(w, t, variability=False)
    (mr, mp, _), (dr, dp, _) = runs["megatron"], runs["deepspeed"]
    send = p2p_seconds(dp.workload, dp.topo, dp.groups)
    assert send > 0 and not np.any(dp.engine_input.p2p) and np.all(mp.engine_input.p2p == send)
    step = rendezvous_seconds(dp.workload, dp.topo, dp.groups)  # 2 TP-slice sends + gather
    fwd, bwd = dp.engine_input.fwd - mp.engine_input.fwd, dp.engine_input.bwd - mp.engine_input.bwd
    # each step's rendezvous transfers (TrainSchedule): a forward exchanges with the
    # previous stage, a backward with the next; the first / last stage has none to do
    assert step > 0 and np.allclose(fwd[1:], step) and np.allclose(fwd[0], 0.0)
    assert np.allclose(bwd[:3], step) and np.allclose(bwd[3], 0.0)
    assert dr.step_time_s > mr.step_time_s


def test_deepspeed_pipeline_engine_factor_scales_pipelined_phases_only():
    """stacks/deepspeed.yaml efficiency.pipeline_engine: every forward and backward phase of
    a pipelined run x the factor, counted as compute; not without PP (the ZeRO-3 path)."""
    from simulator.workload.blocking_p2p import rendezvous_seconds
    plan = {"parallelism.pipeline": 4, "parallelism.tensor": 2, "parallelism.data": 1,
            "training.global_batch_size": 16, "training.use_flash_attn": False,
            "training.stack": "deepspeed"}
    factor = load_stack("deepspeed").efficiency["pipeline_engine"]
    assert 1.1 < factor < 1.3

    def run(over, value=None):
        if value is not None:
            over = dict(over, **{"training.stack_settings": {"efficiency.pipeline_engine":
                                                             value}})
        return simulate_resolved(*resolve("llama3-8b", "dgx-h100", over), variability=False)

    (r1, p1, _), (rf, pf, _) = run(plan, 1.0), run(plan)
    e1, ef = p1.engine_input, pf.engine_input
    t = rendezvous_seconds(pf.workload, pf.topo, pf.groups)
    # the kernels scale; the blocking transfers, added after them, do not (stage 0 forwards
    # and stage 3 backwards without one)
    f1, b1 = e1.fwd - t, e1.bwd - t
    f1[0] += t
    b1[3] += t
    fk, bk = ef.fwd - (e1.fwd - f1), ef.bwd - (e1.bwd - b1)
    assert np.allclose(fk, factor * f1) and np.allclose(bk, factor * b1)
    for s in range(4):  # the seconds it adds are compute
        assert pf.totals[s]["compute"] - p1.totals[s]["compute"] == pytest.approx(
            (factor - 1) * float(f1[s].sum() + b1[s].sum()))
        assert pf.totals[s]["pp"] == pytest.approx(p1.totals[s]["pp"])
    assert rf.breakdown_s["compute"] > r1.breakdown_s["compute"]
    assert any("efficiency.pipeline_engine" in n for n in rf.notes)
    # the step: nearly the factor on a compute-bound 1F1B step, never more
    assert 1 + 0.8 * (factor - 1) < rf.step_time_s / r1.step_time_s <= factor
    # without pipeline parallelism nothing changes (ZeRO-3 runs: no run says)
    flat = dict(FSDP, **{"training.stack": "deepspeed"})
    assert run(flat)[0].step_time_s == run(flat, 1.0)[0].step_time_s
    # the range a fitted factor may take, named in the error
    with pytest.raises(ConfigError, match=r"efficiency\.pipeline_engine"):
        run(plan, 3.0)


def test_deepspeed_runs_only_its_train_schedule(capsys):
    """stacks/deepspeed.yaml pipeline.schedules: its engine runs 1F1B (TrainSchedule) only; a
    plan with another schedule is an error naming the field, and the search tries 1F1B only."""
    from simulator.sweep.search import search_plans
    assert load_stack("deepspeed").pipeline_schedules == ("1f1b",)
    assert load_stack("megatron").pipeline_schedules is None
    inter = {"training.stack": "deepspeed", "parallelism.pipeline": 4,
             "parallelism.virtual_pipeline": 2, "parallelism.pipeline_schedule": "interleaved",
             "parallelism.data": 2}
    with pytest.raises(ConfigError, match="pipeline_schedule") as err:
        resolve("llama3-8b", "dgx-h100", inter)
    assert "1f1b" in str(err.value) and "deepspeed" in str(err.value)
    # the same plan on Megatron's stack, and on DeepSpeed's where a run states a runtime that
    # has interleaving (training.stack_settings)
    resolve("llama3-8b", "dgx-h100", dict(inter, **{"training.stack": "megatron"}))
    resolve("llama3-8b", "dgx-h100", dict(inter, **{"training.stack_settings": {
        "pipeline.schedules": ["1f1b", "interleaved"]}}))
    with pytest.raises(ConfigError, match=r"stack_settings\.pipeline\.schedules"):
        resolve("llama3-8b", "dgx-h100", dict(inter, **{"training.stack_settings": {
            "pipeline.schedules": ["round_robin"]}}))
    # from the command line: one line, exit 2
    argv = ["run", "llama3-8b", "-t", "dgx-h100"] + [
        a for k, v in inter.items() for a in ("--set", f"{k}={v}")]
    assert main(argv) == 2
    assert "pipeline.schedules" in capsys.readouterr().err
    # the search: only 1F1B by default; interleaving asked for is refused by name
    found = search_plans("llama3-70b", "dgx-a100", 64, 50,
                         overrides={"training.stack": "deepspeed"})
    assert found.schedules == ("1f1b",)
    pipelined = found.plans[found.plans["pp"] > 1]
    assert len(pipelined) and set(pipelined["schedule"]) == {"1f1b"}
    assert set(found.plans["vp"]) == {1}
    with pytest.raises(ConfigError, match="--schedules"):
        search_plans("llama3-8b", "dgx-h100", 32, 5, overrides={"training.stack": "deepspeed"},
                     schedules="interleaved")


def test_deepspeed_context_parallelism_is_ulysses(capsys):
    """stacks/deepspeed.yaml context_parallel.algorithms: DeepSpeed's sequence parallelism is
    Ulysses; a ring plan is an error naming the field, and the search's CP plans run Ulysses."""
    from simulator.sweep.search import search_plans
    assert load_stack("deepspeed").cp_algorithms == ("ulysses",)
    assert load_stack("megatron").cp_algorithms is None
    ring = {"training.stack": "deepspeed", "parallelism.context": 2, "parallelism.data": 4}
    with pytest.raises(ConfigError, match="context_parallel_algo") as err:
        resolve("llama3-8b", "dgx-h100", ring)
    assert "ulysses" in str(err.value)
    w = resolve("llama3-8b", "dgx-h100", dict(ring, **{
        "parallelism.context_parallel_algo": "ulysses"}))[0]
    assert w.parallelism.context == 2
    resolve("llama3-8b", "dgx-h100", dict(ring, **{"training.stack": "megatron"}))
    assert main(["run", "llama3-8b", "-t", "dgx-h100"] + [
        a for k, v in ring.items() for a in ("--set", f"{k}={v}")]) == 2
    assert "context_parallel.algorithms" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"stack_settings\.context_parallel\.algorithms"):
        resolve("llama3-8b", "dgx-h100", dict(ring, **{"training.stack_settings": {
            "context_parallel.algorithms": ["star"]}}))
    # the search gives its CP candidates Ulysses, and says so in its overrides
    found = search_plans("llama3-70b", "dgx-a100", 64, 50,
                         overrides={"training.stack": "deepspeed"})
    assert found.overrides["parallelism.context_parallel_algo"] == "ulysses"
    assert (found.plans["cp"] > 1).any()


def test_a_run_sets_its_own_profile_values():
    """training.stack_settings: the recipe's values win over the profile and its release;
    keys and types are checked and errors name the run's field."""
    base = dict(FSDP, **{"training.stack": "nemo-automodel",
                         "training.stack_release": "AutoModel 2026-04"})
    own = dict(base, **{"training.stack_settings": {
        "fsdp.reshard_after_forward": False, "fsdp.reduce_dtype": "fp32",
        "launch.elementwise_bytes_factor": {"rotary": 7.0}}})
    w0, w1 = resolve("llama3-8b", "dgx-h100", base)[0], resolve("llama3-8b", "dgx-h100", own)[0]
    s0, s1 = run_stack(w0.training), run_stack(w1.training)
    assert (s0.reshard_after_forward, s0.reduce_dtype) == (True, "bf16")  # the release's
    assert (s1.reshard_after_forward, s1.reduce_dtype) == (False, "fp32")  # the run's
    assert s1.elementwise == {"rotary": 7.0} and "input_layernorm" in s0.elementwise
    # kept weights: no backward re-gather (shorter step), the stage's weights held (memory)
    t0 = simulate("llama3-8b", "dgx-h100", own, variability=False)
    t1 = simulate("llama3-8b", "dgx-h100", dict(own, **{"training.stack_settings": {
        "fsdp.reduce_dtype": "fp32", "launch.elementwise_bytes_factor": {"rotary": 7.0}}}),
        variability=False)
    assert t0.step_time_s < t1.step_time_s
    assert t0.memory_breakdown_GB["comm_buffers"] > t1.memory_breakdown_GB["comm_buffers"]
    for settings, field in [
            ({"fsdp.reshard": False}, "training.stack_settings.fsdp.reshard"),
            ({"fsdp.reshard_after_forward": "no"},
             "training.stack_settings.fsdp.reshard_after_forward"),
            ({"fsdp.prefetch_depth": 1.5}, "training.stack_settings.fsdp.prefetch_depth"),
            ({"fsdp.units_per_layer": 0}, "training.stack_settings.fsdp.units_per_layer"),
            ({"fsdp.reduce_dtype": "fp16"}, "training.stack_settings.fsdp.reduce_dtype"),
            ({"launch.elementwise_bytes_factor": {"rotary": -1}},
             "training.stack_settings.launch.elementwise_bytes_factor"),
            ({"attention.family": "xformers"}, "training.stack_settings.attention.family")]:
        with pytest.raises(ConfigError) as err:
            w = resolve("llama3-8b", "dgx-h100", dict(base, **{
                "training.stack_settings": settings}))[0]
            run_stack(w.training)
        assert err.value.field == field
    # a value the profile's other values forbid: named as the run's settings
    with pytest.raises(ConfigError, match="conflicts with the profile's"):
        w = resolve("llama3-8b", "dgx-h100", dict(FSDP, **{
            "training.stack": "torchtitan", "training.stack_settings": {"fp8.input_bytes": 0}}))[0]
        run_stack(w.training)


def test_kept_weights_hold_only_gathered_experts():
    """Without reshard_after_forward the stage's gathered weights stay; expert weights with one
    expert-data-parallel rank are the GPU's own (never gathered), and gradients still stage a
    unit at a time."""
    over = {"model.num_layers": 4, "model.moe.first_k_dense": 0, "parallelism.pipeline": 1,
            "parallelism.virtual_pipeline": None, "parallelism.pipeline_schedule": "1f1b",
            "parallelism.pipeline_model_parallel_layout": None,
            "parallelism.data": 8, "parallelism.expert": 8, "parallelism.tensor": 1,
            "model.moe.max_nodes_per_token": None, "training.global_batch_size": 16,
            "training.stack": "nemo-automodel", "training.use_megatron_fsdp": True,
            "training.stack_settings": {"fsdp.reshard_after_forward": False}}
    w = resolve("deepseek-v3", "dgx-h100", over)[0]
    part = plan_shape(w).partition
    held = fsdp_staged_params(w, part, 0)
    lp = layer_params(w, True)
    tables = sum(memory_model.stage_tables(w, part, 0))
    assert held == pytest.approx(4 * lp.dense + tables)  # EP 8 of 8: no expert-DP sharding
    w4 = resolve("deepseek-v3", "dgx-h100", dict(over, **{"parallelism.expert": 4}))[0]
    lp4 = layer_params(w4, True)  # expert-DP 2: the experts are gathered too
    assert fsdp_staged_params(w4, plan_shape(w4).partition, 0) == pytest.approx(
        4 * lp4.total + tables)
    two_units = fsdp_staged_params(w, part, 0, gradients=True)
    assert two_units == pytest.approx(lp.total + max(lp.total, *memory_model.stage_tables(
        w, part, 0)))


def test_pytorch_pipelining_syncs_fsdp_once_per_schedule():
    """Under pipeline parallelism a stage of PyTorch's pipelining runs every backward with
    FSDP2's gradient sync off and reduce-scatters after the last one, in line; weights kept
    after the forward are gathered on the first forward only (stacks/torchtitan.yaml
    fsdp.sync_once_per_schedule)."""
    from simulator.workload.fsdp import _schedule_traffic, once_per_schedule
    fwd = np.array([1.0, 1.0, 1.0, 0.0])
    bwd = np.array([2.0, 2.0, 2.0, 0.0])
    f, b = _schedule_traffic(fwd, bwd, n=4, gather=0.1, reduce=0.2, outer=0.0,
                             copies=(0.0, 0.0, 0.05), keep=True, slowdown=0.0, depth=1)
    assert f[0] > 0 and not f[1:].any()  # one gather, on the first forward
    assert not b[:2].any() and b[2] == pytest.approx(4 * 0.2 + 0.05) and b[3] == 0
    f2, b2 = _schedule_traffic(fwd, bwd, n=4, gather=0.1, reduce=0.2, outer=0.0,
                               copies=(0.0, 0.0, 0.0), keep=False, slowdown=0.0, depth=1)
    assert (f2[:3] > 0).all() and (b2[:2] > 0).all()  # resharded: every pass gathers
    pp = dict(FSDP, **{"parallelism.pipeline": 2, "parallelism.data": 8,
                       "training.stack": "torchtitan",
                       "training.stack_settings": {"fsdp.reshard_after_forward": False}})
    w = resolve("llama3-8b", "dgx-h100", pp)[0]
    assert once_per_schedule(w, run_stack(w.training))
    flat = resolve("llama3-8b", "dgx-h100", dict(pp, **{"parallelism.pipeline": 1,
                                                         "parallelism.data": 16}))[0]
    assert not once_per_schedule(flat, run_stack(flat.training))  # no schedule: per step
    # torchtitan's "default" resharding: after the forward without PP, not under it
    tt = load_stack("torchtitan")
    assert tt.reshards(1) and not tt.reshards(2) and load_stack("megatron").reshards(2)
    part = plan_shape(w).partition
    # the stage's gradients accumulate unsharded until its last backward
    assert fsdp_staged_params(w, part, 0, gradients=True) == pytest.approx(
        fsdp_staged_params(w, part, 0))
    per_mb = dict(pp, **{"training.stack_settings": {"fsdp.reshard_after_forward": False,
                                                     "fsdp.sync_once_per_schedule": False}})
    once_t = simulate("llama3-8b", "dgx-h100", pp, variability=False)
    per_t = simulate("llama3-8b", "dgx-h100", per_mb, variability=False)
    assert once_t.memory_breakdown_GB["comm_buffers"] > per_t.memory_breakdown_GB["comm_buffers"]
    assert once_t.exposed_comm_s["dp"] != per_t.exposed_comm_s["dp"]
    # HSDP: each unit's outer reduction follows its reduce-scatter; on a link of its own it
    # runs beside the next unit's (flow shop), else in line behind it
    for apart, tail in ((False, 4 * (0.2 + 0.3)), (True, 0.2 + 0.3 + 3 * 0.3)):
        _, b3 = _schedule_traffic(fwd, bwd, n=4, gather=0.1, reduce=0.2, outer=0.3,
                                  copies=(0.0, 0.0, 0.0), keep=True, slowdown=0.0, depth=1,
                                  apart=apart)
        assert b3[2] == pytest.approx(tail)


def test_every_profile_key_is_one_a_run_can_set():
    """stacks.KEYS is the one list of what a profile can say: every shipped profile stays
    inside it (a misspelt key would otherwise be read as its default, silently)."""
    import yaml

    from simulator.config.loader import shipped_dirs
    from simulator.config.stacks import KEYS
    for name in stack_names():
        path = next(d / f"{name}.yaml" for d in shipped_dirs("stacks")
                    if (d / f"{name}.yaml").is_file())
        doc = yaml.safe_load(path.read_text())
        for section in KEYS:
            for key in doc.get(section) or {}:
                assert key in KEYS[section], f"{name}: {section}.{key}"
        for entries in ("releases", "recipes"):
            for item in (doc.get(entries) or {}).values():
                for dotted in item["value"]:
                    section, _, key = dotted.partition(".")
                    assert key in KEYS[section], f"{name} {entries}: {dotted}"


def test_torchtitan_from_0_2_runs_cudnn_attention():
    """torchtitan puts cuDNN attention first on every GPU from v0.2.0 (its own
    sdpa_kernel priority); the float8-era releases ran SDPA's FlashAttention-2."""
    s = load_stack("torchtitan")
    assert s.attention_for("torchtitan 0.2.2") == "cudnn"
    assert s.attention_for("torchtitan main 2026-08") == "cudnn"
    assert s.attention_for("torchtitan 0.0.2") == "fa2" and s.attention_for(None) == "fa2"
