"""Published runs fit, impossible plans do not, recipes are stated, memory bars hold, and
Megatron-LM's own estimator agrees on the terms it models."""

from __future__ import annotations

import math
import statistics

import pytest
from test_validation_moe import ROW_PLAN_OVER_MEMORY

from simulator.api import resolve
from simulator.config import load_topology, load_workload
from simulator.hardware import Topology, usable_hbm_bytes
from simulator.memory import estimate_memory, stage_params
from simulator.memory.activations import logits_transient_bytes
from simulator.shape.partition import partition_layers
from simulator.validation.cases import STEP_CATEGORIES, load_cases
from simulator.validation.predict import predict

RECIPE_KEYS = {"grads", "optimizer", "dropout", "fp8_params", "recompute", "micro_batch_size"}


@pytest.fixture(scope="module")
def h100() -> Topology:
    return Topology.from_config(load_topology("dgx-h100"))


@pytest.fixture(scope="module")
def step_cases():
    return load_cases(categories=list(STEP_CATEGORIES))


def test_every_published_step_time_run_fits(step_cases):
    over = []
    for c in step_cases:
        w, t = resolve(c.spec["workload"], c.topology, c.spec["overrides"], c.topology_overrides)
        rep = estimate_memory(w, Topology.from_config(t))
        if not rep.fits:
            over.append(f"{c.id}: {rep.explain()}")
    assert len(step_cases) >= 90
    # Megatron-Bridge 25.11's GPT-OSS row runs its table's plan (MBS 4), where the release's
    # preset sets MBS 1: on the row's plan it does not fit in 80 GB
    # (tests/test_validation_moe.py ROW_PLAN_OVER_MEMORY), which says the preset's plan ran.
    assert {o.split(":")[0] for o in over} == set(ROW_PLAN_OVER_MEMORY), "\n".join(over)


def test_every_step_time_case_states_its_recipe(step_cases):
    for c in step_cases:
        assert c.recipe.get("source"), c.id
        assert set(c.recipe.get("settings") or {}) >= RECIPE_KEYS, c.id
        assert isinstance(c.recipe.get("unknown"), list), c.id


def test_70b_with_optimizer_on_one_80gb_gpu_stays_impossible(h100):
    w = load_workload("llama3-70b", {"parallelism.tensor": 1, "parallelism.pipeline": 1,
                                     "parallelism.data": 1, "parallelism.virtual_pipeline": None,
                                     "parallelism.pipeline_schedule": "1f1b",
                                     "parallelism.sequence_parallel": False,
                                     "training.recompute": "full",
                                     "training.grad_reduce_in_fp32": False})
    assert estimate_memory(w, h100).worst.total > 10 * h100.gpu.hbm_bytes


def test_405b_tp8_on_one_node_stays_impossible(h100):
    w = load_workload("llama3-405b", {"parallelism.pipeline": 1, "parallelism.data": 1,
                                      "parallelism.virtual_pipeline": None,
                                      "parallelism.pipeline_schedule": "1f1b",
                                      "training.global_batch_size": 1,
                                      "training.recompute": "full",
                                      "training.grad_reduce_in_fp32": False})
    rep = estimate_memory(w, h100)
    assert not rep.fits and rep.worst.total > 4 * h100.gpu.hbm_bytes


def test_h100_capacity_is_what_cuda_exposes(h100):
    assert h100.gpu.hbm_bytes == 81559 * 2**20  # nvidia-smi total, not 80e9
    # an hbm_GB what-if alone still lowers the capacity (GiB, capped by the usable size)
    assert usable_hbm_bytes(40, 81559) == 40 * 2**30
    assert usable_hbm_bytes(40, None) == 40e9


def test_headroom_turns_a_tight_fit_into_a_miss(h100):
    plan = {"training.grad_reduce_in_fp32": False}  # the shipped TP plan
    rep = estimate_memory(load_workload("llama3-8b", plan), h100)
    assert rep.fits and rep.margin_bytes > 0
    need = rep.margin_bytes / 1e9 + 1.0
    tight = load_workload("llama3-8b", {**plan, "training.memory_headroom_GB": need})
    rep2 = estimate_memory(tight, h100)
    assert not rep2.fits and rep2.margin_bytes == pytest.approx(-1e9)
    assert "headroom" in rep2.explain()


def test_peak_memory_category_meets_its_bars():
    cases = load_cases(categories=["peak_memory"])
    errs = [abs(predict(c) / c.measured - 1) for c in cases]
    assert len(errs) >= 4
    assert statistics.median(errs) <= 0.10 and max(errs) <= 0.20, errs


# --- Megatron-LM's estimator, megatron/training/theoretical_memory_usage.py at commit
# d98e8a64ddf34856e74b24714e3bedb2f5a39553: its arithmetic for a dense GPT, reimplemented.

def megatron_weight_and_optimizer(w) -> float:
    """compute_weight_and_optimizer_memory: bytes on the most loaded shard (first stage),
    ``18`` bytes per parameter, ``6 + 12/dp`` with the distributed optimizer."""
    m, p = w.model, w.parallelism
    h, a, g, d = m.hidden_size, m.num_attention_heads, m.groups, m.head_dim
    attn = 2 * h * h * ((1 + g / a) * (a * d / h))
    mlp = 2 * h * m.ffn * (1.5 if m.gated_linear_unit else 1)
    norms = 2 * h * 2  # LayerNorm weight + bias, two per layer
    vocab = math.ceil(m.vocab_size / (128 * p.tensor)) * 128 * p.tensor
    emb = h * vocab
    tp_sharded = ((attn + mlp) * m.num_layers / p.pipeline + emb) / p.tensor
    replicated = (norms * m.num_layers + 2 * h) / p.pipeline
    if m.untie_embeddings_and_output_weights and p.pipeline == 1:
        tp_sharded += emb / p.tensor
    per = 6 + 12 / p.data if w.training.distributed_optimizer else 18
    return (tp_sharded + replicated) * per


def megatron_activation_sp_selective(w) -> float:
    """compute_activation_memory (SP + selective path): first-stage bytes."""
    m, p = w.model, w.parallelism
    s, b, h = m.seq_length, w.training.micro_batch_size, m.hidden_size
    act = s * b * h * (18 + 4 * m.ffn / h) * m.num_layers
    act += 8 * s * b * p.pipeline + s * b * h * p.pipeline
    if p.vp > 1:
        act *= 1 + (p.pipeline - 1) / (p.pipeline * p.vp)
    if p.pipeline == 1:
        vocab = math.ceil(m.vocab_size / (128 * p.tensor)) * 128 * p.tensor
        act += s * b * h * 4 * (1 + vocab / h)
    return act / p.tensor


MEGATRON_SETTING = {  # its assumptions: MHA, bf16, fp32 grads, SP, selective, dropout masks
    "parallelism.tensor": 8, "parallelism.pipeline": 8, "parallelism.data": 4,
    "parallelism.sequence_parallel": True, "training.recompute": "selective",
    "training.global_batch_size": 1024, "training.use_flash_attn": False}


@pytest.mark.parametrize("over", [
    {},
    {"parallelism.virtual_pipeline": 4, "parallelism.pipeline_schedule": "interleaved"},
    {"parallelism.pipeline": 1, "parallelism.virtual_pipeline": None,
     "parallelism.pipeline_schedule": "1f1b"},
    {"training.distributed_optimizer": False},
])
def test_megatron_estimator_cross_check(h100, over):
    base = {"parallelism.virtual_pipeline": None, "parallelism.pipeline_schedule": "1f1b",
            **MEGATRON_SETTING, **over}
    w = load_workload("gpt3-175b", base)
    st = estimate_memory(w, h100).stages[0]
    states = st.parameters + st.gradients + st.optimizer
    assert states == pytest.approx(megatron_weight_and_optimizer(w), rel=2e-4)
    # Megatron adds 8*s*b bytes per in-flight micro-batch for the input ids; we do not.
    ids = 8 * w.model.seq_length * w.training.micro_batch_size * w.parallelism.pipeline / 8
    if w.parallelism.vp > 1:
        ids *= 1 + (w.parallelism.pipeline - 1) / (w.parallelism.pipeline * w.parallelism.vp)
    # and it leaves out the 16-bit logits beside the fp32 ones (logits_transient_bytes)
    extra = logits_transient_bytes(w) if w.parallelism.pipeline == 1 else 0.0
    assert st.activations - extra == pytest.approx(megatron_activation_sp_selective(w) - ids,
                                                   rel=1e-9)
    n = stage_params(w, partition_layers(w), 0).total
    assert st.parameters == 2 * n


SAVINGS_OFF = {"training.activation_func_fp8_input_store": False,
               "training.attention_output_store_bits": 16,
               "training.use_precision_aware_optimizer": False,
               "training.exp_avg_dtype": "fp32", "training.exp_avg_sq_dtype": "fp32"}


def test_deepseek_v3_h800_plan_fits_with_its_stated_savings():
    # DeepSeek-V3's own run (workloads/deepseek-v3-h800.yaml: PP 16 DualPipe, EP 64, ZeRO-1
    # data parallel, no TP, 2048 H800 of 80 GB). With the memory savings the report states it
    # fits (the MTP module's layer and logits counted on the last stage); without the FP8
    # SwiGLU input, the E5M6 attention output and the BF16 moments it does not.
    def report(over):
        w, t = resolve("deepseek-v3-h800", "h800", over)
        return estimate_memory(w, Topology.from_config(t))
    saved = report({})
    assert saved.fits, saved.explain()
    plain = report(SAVINGS_OFF)
    assert not plain.fits
    # each stated saving lowers the peak: the FP8 SwiGLU input, then the BF16 moments
    fp8_only = report({k: v for k, v in SAVINGS_OFF.items() if "fp8_input" not in k})
    assert plain.worst.total > fp8_only.worst.total > saved.worst.total
    # the E5M6 cache of the attention output alone: 4 of 16 bits of each layer's a*v output
    e5m6_off = report({"training.attention_output_store_bits": 16})
    assert e5m6_off.worst.total > saved.worst.total


def test_mtp_layer_and_logits_are_held_where_they_run(h100):
    """One MTP module (DeepSeek-V3) adds, on the stage that runs it, one layer of the last
    layer's kind and the two inputs of its projection for each micro-batch whose head inputs
    the stage holds, and one more set of head logits; nothing on the other stages."""
    from simulator.memory.activations import activation_bytes_per_layer, output_activation_bytes

    over = {"parallelism.pipeline_model_parallel_layout": None,
            "model.moe.router_load": "uniform",  # every expert at its mean load
            "training.recompute": "selective", "training.recompute_modules": ["mla_up_proj"]}
    def stages(mtp):
        w = load_workload("deepseek-v3", {**over, "model.mtp_num_layers": mtp})
        return w, [st.activations for st in estimate_memory(w, h100).stages]
    w, with_mtp = stages(1)
    _, without = stages(0)
    assert with_mtp[:-1] == without[:-1]
    layer = activation_bytes_per_layer(w, True) + 2 * activation_bytes_per_layer(w, True,
                                                                               recompute="full")
    # interleaved 1F1B holds one micro-batch's head inputs on the last stage
    assert with_mtp[-1] - without[-1] == pytest.approx(layer + output_activation_bytes(w))
