"""Memory model: Korthikanti formulas, the general activation model, parameters, fit."""

from __future__ import annotations

import pytest

from simulator.config import load_topology, load_workload
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.memory import (
    activation_bytes_per_layer,
    estimate_memory,
    is_moe_layer,
    korthikanti_full_recompute,
    korthikanti_no_parallel,
    korthikanti_tp,
    korthikanti_tp_selective,
    korthikanti_tp_sp,
    korthikanti_tp_sp_selective,
    microbatches_in_flight,
    stage_params,
)
from simulator.shape.partition import partition_layers

S, B, H, A, T = 2048, 1, 12288, 96, 8
SBH = S * B * H  # 25,165,824; 5*a*s/h = 80, 5*a*s/(h*t) = 10


@pytest.fixture(scope="module")
def h100() -> Topology:
    return Topology.from_config(load_topology("dgx-h100"))

# The plan several cases were written for: Llama 3 8B on one node as pure DP8.
TP1 = {"parallelism.tensor": 1, "parallelism.data": 8, "parallelism.sequence_parallel": False}


def gpt3(**over) -> object:
    base = {"parallelism.tensor": T, "parallelism.pipeline": 1, "parallelism.data": 1,
            "parallelism.virtual_pipeline": None, "parallelism.pipeline_schedule": "1f1b",
            "parallelism.sequence_parallel": False, "training.use_flash_attn": False}
    base.update(over)
    return load_workload("gpt3-175b", base)


def test_korthikanti_table2_hand_computed():
    # s*b*h = 2048*12288 = 25,165,824 bytes per unit coefficient.
    assert korthikanti_no_parallel(S, B, H, A) == 2_868_903_936  # *(34 + 80)
    assert korthikanti_tp(S, B, H, A, T) == 578_813_952  # *(10 + 3 + 10)
    assert korthikanti_tp_sp(S, B, H, A, T) == 358_612_992  # *(4.25 + 10)
    assert korthikanti_tp_selective(S, B, H, A, T) == 327_155_712  # *(10 + 3)
    assert korthikanti_tp_sp_selective(S, B, H, A, T) == 106_954_752  # *4.25
    assert korthikanti_full_recompute(S, B, H) == 50_331_648  # *2


@pytest.mark.parametrize("sp,recompute,ref", [
    (False, "none", korthikanti_tp(S, B, H, A, T)),
    (True, "none", korthikanti_tp_sp(S, B, H, A, T)),
    (False, "selective", korthikanti_tp_selective(S, B, H, A, T)),
    (True, "selective", korthikanti_tp_sp_selective(S, B, H, A, T)),
    (False, "full", korthikanti_full_recompute(S, B, H)),
])
def test_general_model_reproduces_paper_setting(sp, recompute, ref):
    w = gpt3(**{"parallelism.sequence_parallel": sp, "training.recompute": recompute})
    assert activation_bytes_per_layer(w) == pytest.approx(ref, rel=1e-12)


def test_general_model_no_parallelism():
    w = gpt3(**{"parallelism.tensor": 1})
    assert activation_bytes_per_layer(w) == pytest.approx(korthikanti_no_parallel(S, B, H, A))


def test_selective_plus_sp_cuts_gpt3_activations_about_5x():
    base = activation_bytes_per_layer(gpt3())
    best = activation_bytes_per_layer(gpt3(**{"parallelism.sequence_parallel": True,
                                             "training.recompute": "selective"}))
    ratio = base / best
    assert ratio == pytest.approx(23 / 4.25)  # 5.41
    assert 4.5 < ratio < 6.0


def test_full_recompute_keeps_layer_input_only():
    w = gpt3(**{"training.recompute": "full"})
    assert activation_bytes_per_layer(w) == 2 * SBH
    w_sp = gpt3(**{"training.recompute": "full", "parallelism.sequence_parallel": True})
    assert activation_bytes_per_layer(w_sp) == 2 * SBH / T
    # one layer's full activations are added once as the recompute working set
    rep = estimate_memory(w, Topology.from_config(load_topology("dgx-h100")))
    in_flight = microbatches_in_flight(w, 0)
    full = activation_bytes_per_layer(w, recompute="none")
    assert rep.stages[0].activations > in_flight * 96 * 2 * SBH + full


def test_flash_attention_drops_score_term_like_selective():
    flash = activation_bytes_per_layer(gpt3(**{"training.use_flash_attn": True}))
    assert flash == pytest.approx(korthikanti_tp_selective(S, B, H, A, T))


def test_gqa_swiglu_and_cp_terms():
    w = load_workload("llama3-8b", TP1)  # s=8192, h=4096, a=32, g=8, d=128, f=14336, TP1
    s, h, f = 8192, 4096, 14336
    mha = load_workload("llama3-8b", {**TP1, "model.num_query_groups": 32})
    # K and V are 2*s*b*g*d each instead of 2*s*b*h
    kv_saving = 2 * 2 * s * (32 - 8) * 128
    assert activation_bytes_per_layer(mha) - activation_bytes_per_layer(w) == kv_saving
    # gated FFN stores 6*s*b*f bytes, a plain one 4*s*b*f
    plain = load_workload("llama3-8b", {**TP1, "model.gated_linear_unit": False})
    assert activation_bytes_per_layer(w) - activation_bytes_per_layer(plain) == 2 * s * f
    # Llama trains without dropout: Korthikanti's 10sbh less the two 1-byte masks
    expected = s * h * 8 + 2 * s * (4096 + 2 * 1024 + 4096) + 6 * s * f
    assert activation_bytes_per_layer(w) == expected
    dropout = load_workload("llama3-8b", {**TP1, "model.hidden_dropout": 0.1})
    assert activation_bytes_per_layer(dropout) - activation_bytes_per_layer(w) == 2 * s * h
    cp2 = load_workload("llama3-8b", {**TP1, "parallelism.context": 2})
    assert activation_bytes_per_layer(cp2) == pytest.approx(expected / 2)


def moe_workload(**over):
    doc = {"model": {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
                     "ffn_hidden_size": 2048, "vocab_size": 32000, "seq_length": 1024,
                     "gated_linear_unit": True,
                     "moe": {"num_experts": 8, "router_topk": 2, "layer_freq": 2}},
           "parallelism": {"tensor": 2, "data": 4, "expert": 4, "sequence_parallel": True},
           "training": {"global_batch_size": 16}}
    return load_workload(doc, over)


def test_moe_activations_scale_with_load_and_capacity():
    w = moe_workload()
    assert [is_moe_layer(w, i) for i in range(4)] == [True, False, True, False]
    one = activation_bytes_per_layer(w, moe_layer=True)
    two = activation_bytes_per_layer(w, moe_layer=True, expert_load_factor=2.0)
    s, k, t, etp, f, h = 1024, 2, 2, 2, 2048, 1024
    # per-GPU routed-token bytes at load 1: the gated activation (6 f) and the dispatched
    # input (2 h, over ETP); Megatron-Core 0.13+ (the default release) keeps no expert output
    routed = s * k / t * (6 * f + 2 * h * etp)
    assert two - one == pytest.approx(routed)
    # releases before 0.13 scale the expert outputs in the combine and keep them (2 h more)
    old = moe_workload(**{"training.stack_release": "Megatron-Core 0.12"})
    old_routed = s * k / t * (6 * f + 2 * 2 * h * etp)
    assert (activation_bytes_per_layer(old, True, 2.0) - activation_bytes_per_layer(old, True)
            == pytest.approx(old_routed))
    # --activation-func-fp8-input-store keeps the SwiGLU input (the FC1 output) in FP8
    store = moe_workload(**{"training.activation_func_fp8_input_store": True})
    assert (activation_bytes_per_layer(store, True, 2.0) - activation_bytes_per_layer(store, True)
            == pytest.approx(s * k / t * (2 * f + 2 * f + 2 * h * etp)))  # FP8 FC1 output
    capped = moe_workload(**{"model.moe.capacity_factor": 1.25})
    assert activation_bytes_per_layer(capped, True, 3.0) == pytest.approx(
        activation_bytes_per_layer(w, True, 1.25))
    with pytest.raises(ConfigError):
        activation_bytes_per_layer(w, True, 0.0)


def test_moe_parameters_and_expert_optimizer_sharding(h100):
    w = moe_workload()
    part = partition_layers(w)
    sp = stage_params(w, part, 0)
    experts_per_rank = 8 / 4 * 3 * 1024 * 2048 / 2  # E/EP * 3*h*f_e / ETP
    assert sp.expert == pytest.approx(2 * experts_per_rank)  # two MoE layers
    w8 = moe_workload(**{"parallelism.data": 8})
    edp = 8 * 2 // (4 * 2)  # DP*CP*TP / (EP*ETP) = 2
    rep = estimate_memory(w8, h100)
    assert rep.stages[0].optimizer == pytest.approx(12 * (sp.dense / 8 + sp.expert / edp))
    with pytest.raises(ConfigError, match=r"parallelism\.expert"):
        estimate_memory(moe_workload(**{"parallelism.expert": 3}), h100)


def test_parameter_counts_match_published_sizes():
    for name, tp, published in [("llama3-8b", 1, 8.03e9), ("llama3-70b", 1, 70.6e9),
                                ("gpt3-175b", 1, 174.6e9)]:
        w = load_workload(name, {"parallelism.tensor": tp, "parallelism.pipeline": 1,
                                 "parallelism.virtual_pipeline": None,
                                 "parallelism.pipeline_schedule": "1f1b"})
        total = stage_params(w, partition_layers(w), 0).total
        assert total == pytest.approx(published, rel=0.005), name


def test_tied_embedding_on_first_and_last_stage():
    w = load_workload("tiny")  # tied, PP 2, TP 2, 4 layers of 1024
    part = partition_layers(w)
    table = 32000 * 1024 / 2
    first, last = stage_params(w, part, 0), stage_params(w, part, 1)
    assert first.total == pytest.approx(last.total - 1024)  # last adds the final norm
    pp1 = load_workload("tiny", {"parallelism.pipeline": 1})
    whole = stage_params(pp1, partition_layers(pp1), 0).total
    assert whole == pytest.approx(first.total + last.total - table)


def test_pipeline_microbatches_in_flight():
    flat = {"parallelism.pipeline_schedule": "1f1b", "parallelism.virtual_pipeline": None}
    w = load_workload("llama3-405b", flat)  # 1F1B, p=16, m=16
    p = 16
    assert microbatches_in_flight(w, 0) == p
    assert microbatches_in_flight(w, p - 1) == 1
    g = load_workload("llama3-405b", {**flat, "parallelism.pipeline_schedule": "gpipe"})
    assert all(microbatches_in_flight(g, i) == g.num_microbatches for i in range(p))
    il = load_workload("llama3-70b")  # interleaved p=4, v=5
    assert microbatches_in_flight(il, 0) == pytest.approx(4 * (1 + 3 / (4 * 5)))


def test_first_stage_activations_hold_p_microbatches(h100):
    w = load_workload("tiny", {"training.global_batch_size": 16})  # p=2, m=4, 2 layers/stage
    rep = estimate_memory(w, h100)
    per_layer = activation_bytes_per_layer(w)
    emb = 1024 * 2 * 1024 / 2  # s*b*h/t dropout mask, 1 byte
    assert rep.stages[0].activations == pytest.approx(2 * (2 * per_layer + emb))


def test_distributed_optimizer_bytes(h100):
    w = load_workload("llama3-8b", TP1)  # DP 8, distributed optimizer
    n = stage_params(w, partition_layers(w), 0).total
    st = estimate_memory(w, h100).stages[0]
    assert (st.parameters, st.gradients, st.optimizer) == pytest.approx((2 * n, 4 * n, 12 * n / 8))
    plain = load_workload("llama3-8b", {**TP1, "training.distributed_optimizer": False})
    assert estimate_memory(plain, h100).stages[0].optimizer == pytest.approx(12 * n)


def test_llama3_70b_on_one_gpu_does_not_fit(h100):
    w = load_workload("llama3-70b", {"parallelism.tensor": 1, "parallelism.pipeline": 1,
                                     "parallelism.data": 1, "parallelism.virtual_pipeline": None,
                                     "parallelism.pipeline_schedule": "1f1b",
                                     "parallelism.sequence_parallel": False})
    rep = estimate_memory(w, h100)
    assert not rep.fits and not rep.fits_in_memory
    assert rep.memory_per_gpu_GB > 1000  # ~70.6e9 params * 18 bytes
    assert rep.worst.biggest == "optimizer"
    text = rep.explain()
    assert text.startswith("stage 0 needs ") and "of 85.52 GB" in text and "over" in text
    assert "biggest: optimizer" in text
    assert set(rep.memory_breakdown_GB) == {"parameters", "fp8_weight_copies", "gradients",
                                            "optimizer", "activations", "comm_buffers",
                                            "framework"}
    assert sum(rep.memory_breakdown_GB.values()) == pytest.approx(rep.memory_per_gpu_GB)


def test_fitting_plan_is_explained_with_free_space(h100):
    rep = estimate_memory(load_workload("tiny"), h100)
    assert rep.fits and "GB free" in rep.explain()
    assert rep.worst.framework == h100.gpu.framework_memory_bytes


def test_too_small_global_batch_is_a_config_error(h100):
    with pytest.raises(ConfigError, match="global_batch_size"):
        estimate_memory(load_workload("llama3-8b", {**TP1, "training.global_batch_size": 4}), h100)


def test_qk_layernorm_costs_two_norm_kernels_and_keeps_their_inputs():
    # Megatron-Core --qk-layernorm (Qwen3): a TE RMSNorm over every query and key head after
    # the QKV projection, read and written once forward (twice that backward), and its input
    # kept for the backward: (heads + groups) x head dim x 2 bytes per token over TP
    from simulator.memory.activations import activation_bytes_per_layer
    from simulator.workload.ops import backward_of, dims, layer_forward

    over = {"parallelism.tensor": 2, "parallelism.data": 4, "training.global_batch_size": 32}
    plain = load_workload("llama3-8b", over)
    normed = load_workload("llama3-8b", {**over, "model.qk_layernorm": True})
    x = dims(normed)
    ops = {o.name: o for o in layer_forward(normed)}
    assert "qk_layernorm" not in {o.name for o in layer_forward(plain)}
    assert ops["qk_layernorm"].nbytes == pytest.approx(2 * x.T * (x.a_t + x.g_t) * x.d * x.e)
    back = {o.name: o for o in backward_of(layer_forward(normed))}
    assert back["qk_layernorm_bwd"].nbytes == pytest.approx(2 * ops["qk_layernorm"].nbytes)
    extra = activation_bytes_per_layer(normed) - activation_bytes_per_layer(plain)
    s, b = normed.model.seq_length, normed.training.micro_batch_size
    heads = normed.model.num_attention_heads + normed.model.num_query_groups
    assert extra == pytest.approx(2 * s * b * heads * normed.model.head_dim / 2)


def test_chunked_loss_keeps_one_slice_of_logits():
    """torchtitan's ChunkedLossWrapper (training.loss_num_chunks): no logits outlive their
    slice; the fp32 gradient of the hidden states (4 s b h) is kept instead, and one
    slice's 16-bit logits and fp32 copy (6 s b V / (t n)) are alive at the peak."""
    from simulator.memory.activations import logits_transient_bytes, output_activation_bytes
    w = gpt3()
    s, b, h, V = (w.model.seq_length, w.training.micro_batch_size, w.model.hidden_size,
                  w.model.vocab_size)
    t = w.parallelism.tensor
    sp = t if w.parallelism.sequence_parallel else 1
    chunked = gpt3(**{"training.loss_num_chunks": 8})
    assert output_activation_bytes(chunked) == pytest.approx(4 * s * b * h / sp + 4 * s * b * h)
    assert logits_transient_bytes(chunked) == pytest.approx(6 * s * b * V / t / 8)
    assert output_activation_bytes(w) == pytest.approx(4 * s * b * h / sp + 4 * s * b * V / t)
    with pytest.raises(ConfigError, match=r"training.loss_num_chunks"):
        from simulator.config.validate import check_config
        bad = gpt3(**{"training.loss_num_chunks": 7})
        check_config(bad, load_topology("dgx-h100"))
