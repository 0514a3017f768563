"""Megatron-Core memory options: each one's memory effect, by hand, and its compute effect."""

from __future__ import annotations

import json

import pytest

from simulator import simulate
from simulator.api import resolve
from simulator.config import load_topology, load_workload
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.memory import activation_bytes_per_layer, estimate_memory, stage_params
from simulator.shape.params import stage_tables
from simulator.shape.partition import parse_layout, partition_layers
from simulator.sweep.tasks import simulate_task

TP1 = {"parallelism.tensor": 1, "parallelism.data": 8, "parallelism.sequence_parallel": False}


@pytest.fixture(scope="module")
def h100() -> Topology:
    return Topology.from_config(load_topology("dgx-h100"))


def _states(w, h100):
    st = estimate_memory(w, h100).stages[0]
    n = stage_params(w, partition_layers(w), 0).total
    return st, n


def _layers(w) -> float:
    """Parameters of one stage's decoder layers, those Transformer Engine scales (the
    embedding and output tables are Megatron-Core modules, not TE ones)."""
    part = partition_layers(w)
    return stage_params(w, part, 0).total - sum(stage_tables(w, part, 0))


def test_precision_aware_optimizer_bf16_state_is_6_bytes(h100):
    w = load_workload("llama3-8b", {**TP1, "training.use_precision_aware_optimizer": True,
                                    "training.main_params_dtype": "bf16",
                                    "training.exp_avg_dtype": "bf16",
                                    "training.exp_avg_sq_dtype": "fp8"})
    st, n = _states(w, h100)
    assert st.optimizer == pytest.approx((2 + 2 + 1) * n / 8)
    with pytest.raises(ConfigError, match="use_precision_aware_optimizer"):
        load_workload("llama3-8b", {"training.exp_avg_dtype": "bf16"})


def test_bf16_main_grads_halve_the_grad_buffer(h100):
    w = load_workload("llama3-8b", {**TP1, "training.grad_reduce_in_fp32": False})
    st, n = _states(w, h100)
    assert st.gradients == 2 * n
    with pytest.raises(ConfigError, match="grad_reduce_in_fp32"):
        load_workload("llama3-8b", {"training.use_precision_aware_optimizer": True,
                                    "training.main_grads_dtype": "bf16"})


@pytest.mark.parametrize("gather,weights,copies", [(False, 2, 2), (True, 1, 1)])
def test_fp8_weights_and_te_copies(h100, gather, weights, copies):
    w = load_workload("llama3-8b", {**TP1, "training.precision": "fp8",
                                    "training.fp8_param_gather": gather})
    st, n = _states(w, h100)
    layers = _layers(w)  # the tables stay 16-bit and keep no copies
    assert (st.parameters, st.fp8_weight_copies) == pytest.approx(
        (weights * layers + 2 * (n - layers), copies * layers), rel=1e-12)


@pytest.mark.parametrize("recipe,gather,copies", [
    ("delayed", False, 1), ("delayed", True, 0), ("tensorwise", False, 1),
    ("tensorwise", True, 0), ("mxfp8", False, 2), ("mxfp8", True, 1)])
def test_blackwell_per_tensor_fp8_keeps_no_transposes(recipe, gather, copies):
    """On a GPU whose FP8 GEMMs take any layout (gpu.fp8_any_layout: B200 / GB200 / GB300),
    per-tensor FP8 caches only the FP8 copy of a 16-bit weight and nothing for an FP8 weight;
    MXFP8 scales rows and columns apart and keeps its column-wise copy, as on Hopper."""
    b200 = Topology.from_config(load_topology("dgx-b200"))
    assert b200.gpu.fp8_any_layout
    w = load_workload("llama3-8b", {**TP1, "training.precision": "fp8",
                                    "training.fp8_recipe": recipe,
                                    "training.fp8_param_gather": gather})
    st, _ = _states(w, b200)
    assert st.fp8_weight_copies == pytest.approx(copies * _layers(w), rel=1e-12)


@pytest.mark.parametrize("release,topology,recipe,gather,copies", [
    ("NeMo 24.04", "dgx-h100", "delayed", True, 0),
    ("NeMo 24.09", "dgx-h100", "tensorwise", True, 0),
    ("NeMo 24.04", "dgx-h100", "delayed", False, 2), ("NeMo 24.04", "dgx-b200", "mxfp8", True, 1),
    (None, "dgx-h100", "delayed", True, 1)])
def test_uncached_weight_transposes_leave_no_fp8_weight_copies(release, topology, recipe, gather,
                                                                copies):
    """disable_parameter_transpose_cache under Transformer Engine 1.x (the NeMo 24 releases):
    a per-tensor FP8 weight's transpose is made in each layer's backward and not kept
    (_Linear.backward, transpose_2d(cache=False)); 16-bit weights still hold their FP8 copy
    and transpose from forward to backward, an MXFP8 weight its column-wise copy, and TE 2
    (no release given: the profile's default) keeps the transpose on the weight once made."""
    w = load_workload("llama3-8b", {**TP1, "training.precision": "fp8",
                                    "training.fp8_recipe": recipe,
                                    "training.fp8_param_gather": gather,
                                    "training.disable_parameter_transpose_cache": True,
                                    "training.stack_release": release})
    st, _ = _states(w, Topology.from_config(load_topology(topology)))
    assert st.fp8_weight_copies == pytest.approx(copies * _layers(w), rel=1e-12)


def test_fp8_param_gather_needs_fp8():
    with pytest.raises(ConfigError, match="precision: fp8"):
        load_workload("llama3-8b", {"training.fp8_param_gather": True})


def _sel(modules, **over):
    return load_workload("llama3-8b", {"parallelism.sequence_parallel": True,
                                       "parallelism.tensor": 2, "parallelism.data": 4,
                                       "training.recompute_granularity": "selective",
                                       "training.recompute_modules": modules, **over})


def test_selective_modules_drop_their_own_bytes():
    base = activation_bytes_per_layer(_sel(["core_attn"]))
    w = _sel(["core_attn"])
    s, b, h, t, f = w.model.seq_length, 1, w.model.hidden_size, 2, w.model.ffn
    # layernorm: the two norm outputs (QKV and FC1 inputs), 2 bytes each, SP-sharded
    assert base - activation_bytes_per_layer(_sel(["layernorm"])) == 4 * s * b * h / t
    # mlp: the SwiGLU internals, 6 bytes per ffn unit, TP-sharded
    assert base - activation_bytes_per_layer(_sel(["mlp"])) == 6 * s * b * f / t
    # shorthand selective = [core_attn]
    short = load_workload("llama3-8b", {"parallelism.sequence_parallel": True,
                                        "parallelism.tensor": 2, "parallelism.data": 4,
                                        "training.recompute": "selective"})
    assert activation_bytes_per_layer(short) == base


def test_moe_act_drops_the_experts_activation_output():
    w = load_workload("mixtral-8x7b")
    rc = load_workload("mixtral-8x7b", {"training.recompute_granularity": "selective",
                                        "training.recompute_modules": ["moe_act"]})
    m, par = w.model, w.parallelism
    s = m.seq_length / par.context
    routed = s * w.training.micro_batch_size * m.moe.router_topk / par.tensor
    f_e = m.moe.ffn_hidden_size or m.ffn
    drop = activation_bytes_per_layer(w, True) - activation_bytes_per_layer(rc, True)
    assert drop == pytest.approx(routed * 2 * f_e)
    whole = load_workload("mixtral-8x7b", {"training.recompute_granularity": "selective",
                                           "training.recompute_modules": ["moe"]})
    assert activation_bytes_per_layer(whole, True) < activation_bytes_per_layer(rc, True)


def test_recompute_arguments_are_checked():
    with pytest.raises(ConfigError, match="contradicts"):
        load_workload("tiny", {"training.recompute": "full",
                               "training.recompute_granularity": "selective"})
    with pytest.raises(ConfigError, match="recompute_modules"):
        load_workload("tiny", {"training.recompute_granularity": "selective",
                               "training.recompute_modules": ["attention"]})
    with pytest.raises(ConfigError, match="full recompute only"):
        load_workload("tiny", {"training.recompute_method": "block"})


def _full(method, n, **over):
    return load_workload("llama3-8b", {**TP1, "training.recompute_granularity": "full",
                                       "training.recompute_method": method,
                                       "training.recompute_num_layers": n, **over})


def test_full_recompute_uniform_and_block_by_hand(h100):
    w = _full("uniform", 4)
    keep, whole = (activation_bytes_per_layer(w, recompute=r) for r in ("full", "none"))
    ref = estimate_memory(load_workload("llama3-8b", {**TP1, "training.recompute": "none"}),
                          h100).stages[0].activations - 32 * whole
    # 32 layers in groups of 4: 8 kept inputs, one group of 4 re-run whole at a time
    assert estimate_memory(w, h100).stages[0].activations == pytest.approx(
        ref + 8 * keep + 4 * whole)
    # block 10: 10 layers keep their input, 22 keep everything, working set one layer
    assert estimate_memory(_full("block", 10), h100).stages[0].activations == pytest.approx(
        ref + 10 * keep + 22 * whole + whole)


def test_recompute_costs_time_in_the_backward():
    over = {"model.num_layers": 8, "training.global_batch_size": 64}
    none = simulate("llama3-8b", "dgx-h100", **over).step_time_s
    sel = simulate("llama3-8b", "dgx-h100", **over, **{
        "training.recompute_granularity": "selective",
        "training.recompute_modules": ["core_attn", "mlp"]}).step_time_s
    block = simulate("llama3-8b", "dgx-h100", **over, **{
        "training.recompute_granularity": "full", "training.recompute_method": "block",
        "training.recompute_num_layers": 2}).step_time_s
    full = simulate("llama3-8b", "dgx-h100", **over, **{"training.recompute": "full"}
                    ).step_time_s
    assert none < sel < full and none < block < full


def test_cpu_offloading_moves_activations_to_the_host(h100):
    over = {**TP1, "parallelism.pipeline": 1}
    w = load_workload("llama3-8b", over)
    off = load_workload("llama3-8b", {**over, "training.cpu_offloading": True,
                                      "training.cpu_offloading_num_layers": 8})
    a, b = estimate_memory(w, h100).stages[0], estimate_memory(off, h100).stages[0]
    per = activation_bytes_per_layer(w)
    assert b.offloaded == pytest.approx(8 * per)
    assert a.activations - b.activations == pytest.approx(7 * per)  # one layer stays as buffer
    with pytest.raises(ConfigError, match="pipeline"):
        load_workload("llama3-8b", {"training.cpu_offloading": True,
                                    "training.cpu_offloading_num_layers": 2,
                                    "parallelism.pipeline": 2})


def test_pipeline_split_options():
    w = load_workload("tiny", {"model.num_layers": 6, "parallelism.pipeline": 4,
                               "parallelism.virtual_pipeline": 2,
                               "parallelism.pipeline_schedule": "interleaved",
                               "parallelism.account_for_embedding_in_pipeline_split": True,
                               "parallelism.account_for_loss_in_pipeline_split": True,
                               "training.global_batch_size": 64})
    assert partition_layers(w).layers == ((0, 1), (1, 1), (1, 1), (1, 0))
    uneven = load_workload("llama3-405b", {"parallelism.decoder_first_pipeline_num_layers": 6,
                                           "parallelism.decoder_last_pipeline_num_layers": 8})
    assert partition_layers(uneven).layers[0] == (3, 3)
    assert partition_layers(uneven).layers[-1] == (4, 4)
    assert parse_layout("E|(tt|)*2,(t|)*4,mL") == ["E", "tt", "tt", "t", "t", "t", "t", "mL"]
    lay = load_workload("llama3-405b", {
        "parallelism.pipeline_model_parallel_layout": "Et*3|(t*4|)*30,t*3L"})
    assert partition_layers(lay).layers[0] == (3, 4)
    assert partition_layers(lay).layers[-1] == (4, 3)
    with pytest.raises(ConfigError, match="decoder layers"):
        partition_layers(load_workload("llama3-405b", {
            "parallelism.pipeline_model_parallel_layout": "Et*3|(t*4|)*30,t*2L"}))


def test_cpu_offloading_is_charged_on_the_host_link():
    over = {**TP1, "parallelism.pipeline": 1, "model.num_layers": 4,
            "training.global_batch_size": 16}
    off = {"training.cpu_offloading": True, "training.cpu_offloading_num_layers": 2}
    base = simulate("llama3-8b", "dgx-h100", **over).step_time_s
    slow = simulate("llama3-8b", "dgx-h100", **over, **off).step_time_s
    fast = simulate("llama3-8b", "dgx-h100", topology_overrides={"gpu.host_link_GBps": 1e6},
                    **over, **off).step_time_s
    assert base < slow and fast == pytest.approx(base)
    with pytest.raises(ConfigError, match="host_link_GBps"):
        simulate("llama3-8b", "dgx-h100", topology_overrides={"gpu.host_link_GBps": None},
                 **over, **off)


def test_distributed_optimizer_shards_over_data_and_context(h100):
    w = load_workload("llama3-8b", {**TP1, "parallelism.data": 4, "parallelism.context": 2})
    st, n = _states(w, h100)
    assert st.optimizer == pytest.approx(12 * n / 8)


def test_sweep_marks_plans_over_memory_with_their_own_status():
    over = {"model.num_layers": 4, "training.global_batch_size": 16}
    w, t = resolve("llama3-8b", "dgx-h100", over)
    ok = json.loads(simulate_task((w, t)))
    assert ok["status"] == "ok" and ok["memory_margin_GB"] > 0
    w2, _ = resolve("llama3-8b", "dgx-h100",
                    {**over, "training.memory_headroom_GB": ok["memory_margin_GB"] + 1})
    out = json.loads(simulate_task((w2, t)))
    assert out["status"] == "over_memory" and "does not fit" in out["reason"]
    assert out["step_time_s"] == pytest.approx(ok["step_time_s"])


@pytest.mark.parametrize("sp", [False, True])
def test_fp8_saves_the_gemm_inputs_te_quantizes(sp):
    # TE keeps the FP8 copy of a linear's input for its weight gradient: the two norm
    # outputs (QKV, FC1 inputs; sequence-parallel shards with SP) and the FC2 input go from
    # 2 bytes to 1; the projection adds a 1-byte copy beside the attention's 16-bit output
    over = {"parallelism.tensor": 2, "parallelism.data": 4, "parallelism.sequence_parallel": sp}
    bf16 = load_workload("llama3-8b", over)
    fp8 = load_workload("llama3-8b", {**over, "training.precision": "fp8"})
    s, b, h, f, t = 8192, 1, 4096, 14336, 2
    qd = 32 * 128
    saved = s * b * (2 * h / (t if sp else 1) + f / t - qd / t)
    assert activation_bytes_per_layer(bf16) - activation_bytes_per_layer(fp8) == \
        pytest.approx(saved)


def test_te_fused_cross_entropy_keeps_16_bit_logits_only(h100):
    from simulator.memory.activations import logits_transient_bytes, output_activation_bytes

    over = {**TP1, "parallelism.pipeline": 2, "parallelism.data": 4}
    plain = load_workload("llama3-8b", over)
    fused = load_workload("llama3-8b", {**over, "training.cross_entropy_loss_fusion": True,
                                        "training.cross_entropy_fusion_impl": "te"})
    native = load_workload("llama3-8b", {**over, "training.cross_entropy_loss_fusion": True})
    logits = 8192 * 1 * 128256  # s * b * V / t, TP 1
    assert output_activation_bytes(plain) - output_activation_bytes(fused) == \
        pytest.approx(2 * logits)  # fp32 -> 16-bit
    assert logits_transient_bytes(plain) == pytest.approx(2 * logits)
    assert logits_transient_bytes(fused) == 0.0
    assert output_activation_bytes(native) == output_activation_bytes(plain)  # not modelled
    last = [estimate_memory(x, h100).stages[-1].activations for x in (plain, fused)]
    assert last[0] - last[1] == pytest.approx(4 * logits)


def test_fp8_saves_the_experts_dispatched_input_as_their_gemm_input():
    # An MoE layer in FP8: the experts' FC1 (TE GroupedLinear) keeps its input's FP8
    # columnwise copy, so each routed token saves h bytes less for the dispatched input
    # and f_e less for the FC2 input; the 16-bit expert output for the combine stays
    over = {"training.precision": "bf16"}
    bf16 = load_workload("mixtral-8x7b", over)
    fp8 = load_workload("mixtral-8x7b", {"training.precision": "fp8"})
    m, p = bf16.model, bf16.parallelism
    s, b, t = m.seq_length, bf16.training.micro_batch_size, p.tensor
    sp = t if p.sequence_parallel else 1
    routed = s * b * m.moe.router_topk / t
    dense = s * b * (2 * m.hidden_size / sp - m.num_attention_heads * m.head_dim / t)
    expected = dense + routed * (m.moe.ffn_hidden_size or m.ffn) + routed * m.hidden_size * p.etp
    assert activation_bytes_per_layer(bf16, moe_layer=True) \
        - activation_bytes_per_layer(fp8, moe_layer=True) == pytest.approx(expected)


DSV3_PP4_VP4 = {"parallelism.pipeline": 4, "parallelism.virtual_pipeline": 4,
                "parallelism.pipeline_schedule": "interleaved", "parallelism.data": 16,
                "parallelism.expert": 64, "training.global_batch_size": 64,
                "parallelism.pipeline_model_parallel_layout": None}


def test_shipped_deepseek_v3_takes_its_recipes_layout():
    """workloads/deepseek-v3.yaml is Megatron-Bridge's 1,024-GPU H100 plan (TP 2 PP 8 VP 4),
    whose recipe sets "Et|(tt|)*30mL": the last global chunk holds only the MTP module and
    the loss. A plan that changes the stage count is told how to drop the layout."""
    part = partition_layers(load_workload("deepseek-v3"))
    assert part.layers[0] == (1, 2, 2, 2) and part.layers[-1] == (2, 2, 2, 0)
    with pytest.raises(ConfigError, match="=null for the simulator's own split"):
        partition_layers(load_workload("deepseek-v3", {"parallelism.pipeline": 4}))


def test_layout_places_mtp_with_the_loss_as_megatron_bridge_deepseek_v3():
    """Megatron-Bridge's DeepSeek-V3 layout for PP 4 x VP 4 (recipes/deepseek/deepseek_v3.py
    at 067f987d): embedding + 4 layers first, 4 layers x 14, then 1 layer + MTP + loss."""
    lay = load_workload("deepseek-v3", {
        **DSV3_PP4_VP4, "parallelism.pipeline_model_parallel_layout": "Et*4|(t*4|)*14tmL"})
    part = partition_layers(lay)
    assert part.layers[0] == (4, 4, 4, 4)
    assert part.layers[-1] == (4, 4, 4, 1)  # the last global chunk: one layer, MTP, loss
    assert sum(map(sum, part.layers)) == 61
    # the simulator's own split of 61 layers over 16 chunks differs (3 on the outermost)
    own = partition_layers(load_workload("deepseek-v3", DSV3_PP4_VP4))
    assert own.layers[-1][-1] == 3


@pytest.mark.parametrize("layout, allowed", [
    ("Et*4|(t*4|)*14tL", "places 0 MTP layers (m); model.mtp_num_layers is 1"),
    ("Et*4|(t*4|)*14tmmL", "places 2 MTP layers (m); model.mtp_num_layers is 1"),
    ("Et*4|(t*4|)*13,t*3m|ttL", "after the last t"),
    ("Et*4|(t*4|)*14mtL", "after the last t"),
    ("Et*4|(t*4|)*14txL", "letter 'x'"),
    # a standalone MTP stage must be the last virtual stage of its rank (VP 4: stages 12-15)
    ("Et*19|(t*6|)*7,m|(|)*6,L", "not the last virtual stage of a pipeline rank"),
])
def test_layout_mtp_rules_are_megatron_cores(layout, allowed):
    w = load_workload("deepseek-v3", {**DSV3_PP4_VP4,
                                      "parallelism.pipeline_model_parallel_layout": layout})
    with pytest.raises(ConfigError, match="pipeline_model_parallel_layout") as info:
        partition_layers(w)
    assert allowed in info.value.message()


def test_layout_without_mtp_refuses_an_m():
    lay = load_workload("llama3-405b", {
        "parallelism.pipeline_model_parallel_layout": "Et*3|(t*4|)*30,t*3mL"})
    with pytest.raises(ConfigError, match=r"model.mtp_num_layers is 0"):
        partition_layers(lay)


DSV3_PP16_VP2 = {"parallelism.pipeline": 16, "parallelism.virtual_pipeline": 2,
                 "parallelism.pipeline_schedule": "interleaved", "parallelism.data": 32,
                 "parallelism.expert": 64, "training.global_batch_size": 512}


def test_standalone_mtp_stage_as_megatron_cores_documented_example():
    """Megatron-Core's docs partition DeepSeek-V3 with PP 16 x VP 2 as "Et*3|(tt|)*29,m|L":
    the MTP layer alone in global chunk 30 (rank 14's last virtual stage), the loss alone in
    chunk 31 (rank 15's). Its parameters and its compute go to rank 14, the final norm and
    the output layer stay on rank 15."""
    from simulator.shape.params import mtp_params
    from simulator.shape.plan_shape import plan_shape
    from simulator.workload.chunk_cost import ChunkCoster

    w, t = resolve("deepseek-v3", "dgx-h100", {
        **DSV3_PP16_VP2, "parallelism.pipeline_model_parallel_layout": "Et*3|(tt|)*29,m|L"})
    part = partition_layers(w)
    assert part.mtp_chunk == 30 and part.counts[-2:] == (0, 0)
    # the same split with no MTP layer: an empty chunk 30
    w0, _ = resolve("deepseek-v3", "dgx-h100", {
        **DSV3_PP16_VP2, "model.mtp_num_layers": 0,
        "parallelism.pipeline_model_parallel_layout": "Et*3|(tt|)*29,|L"})
    shape, shape0 = plan_shape(w), plan_shape(w0)
    mtp = mtp_params(w)
    for s in range(16):
        extra = mtp.dense if s == 14 else 0.0
        assert shape.params[s].dense == pytest.approx(shape0.params[s].dense + extra)
    assert shape.mtp(14, 1) and not shape.mtp(15, 1) and shape.last(15, 1)
    coster = ChunkCoster(w, Topology.from_config(t))
    f_mtp, _, _ = coster.chunk(14, 1, 0, False, False, ops=False)
    f_loss, _, _ = coster.chunk(15, 1, 0, False, True, ops=False)
    assert f_mtp.duration > 0 and f_loss.duration > 0
    # the whole step runs, and the MTP stage is not the loss stage
    r = simulate("deepseek-v3", "dgx-h100", {
        **DSV3_PP16_VP2, "parallelism.pipeline_model_parallel_layout": "Et*3|(tt|)*29,m|L"})
    assert r.step_time_s > 0 and r.fits_in_memory in (True, False)


FSDP = {**TP1, "training.use_megatron_fsdp": True,
        "training.data_parallel_sharding_strategy": "optim_grads_params"}


@pytest.mark.parametrize("stack", ["torchtitan", "fsdp1", "composer", "nemo-automodel"])
def test_pytorch_fsdp_holds_the_main_copy_as_the_sharded_parameter(h100, stack):
    # PyTorch FSDP1 / FSDP2: no 16-bit shard beside the main copy, and the sharded gradient
    # in the main copy's dtype whatever the reduce dtype (simulator/memory/states.py):
    # 4 + 4 + 8 = 16 bytes a parameter built in fp32, sharded over the 8 ranks
    for reduce_fp32 in (True, False):
        w = load_workload("llama3-8b", {**FSDP, "training.stack": stack,
                                        "training.grad_reduce_in_fp32": reduce_fp32})
        st, n = _states(w, h100)
        assert st.parameters == 0.0
        assert st.gradients == pytest.approx(4 * n / 8)
        assert st.optimizer == pytest.approx(12 * n / 8)
    # loaded in bf16 with bf16 moments (NeMo AutoModel's pure-bf16 recipes): 2 + 2 + 4 = 8
    w = load_workload("llama3-8b", {**FSDP, "training.stack": stack,
                                    "training.use_precision_aware_optimizer": True,
                                    "training.main_params_dtype": "bf16",
                                    "training.exp_avg_dtype": "bf16",
                                    "training.exp_avg_sq_dtype": "bf16"})
    st, n = _states(w, h100)
    assert st.parameters + st.gradients + st.optimizer == pytest.approx(8 * n / 8)


@pytest.mark.parametrize("stack", ["megatron", "deepspeed"])
def test_megatron_fsdp_and_zero3_keep_a_16_bit_shard_beside_the_fp32_one(h100, stack):
    w = load_workload("llama3-8b", {**FSDP, "training.stack": stack})
    st, n = _states(w, h100)
    assert st.parameters == pytest.approx(2 * n / 8)
    assert st.gradients == pytest.approx(4 * n / 8)
    assert st.optimizer == pytest.approx(12 * n / 8)


def test_pytorch_fsdp_main_copy_rule_needs_sharded_weights(h100):
    # ZeRO-2-style sharding (optim_grads): the full 16-bit weights stay on every rank
    w = load_workload("llama3-8b", {**FSDP, "training.stack": "torchtitan",
                                    "training.data_parallel_sharding_strategy": "optim_grads"})
    st, n = _states(w, h100)
    assert st.parameters == pytest.approx(2 * n)


def test_pytorch_fsdp_lora_keeps_the_frozen_base_in_16_bit(h100):
    w = load_workload("llama3-8b", {**FSDP, "training.stack": "nemo-automodel",
                                    "training.peft": "lora"})
    st = estimate_memory(w, h100).stages[0]
    sp = stage_params(w, partition_layers(w), 0)
    assert sp.frozen > 0
    assert st.parameters == pytest.approx(2 * sp.frozen / 8)  # the adapters: main copy only
    trained = sp.total - sp.frozen
    assert st.gradients == pytest.approx(4 * trained / 8)
