"""LoRA fine-tuning (``training.peft: lora``): frozen base weights, trainable adapters.

Closed forms from simulator/shape/lora.py and simulator/workload/lora.py: an adapter of
rank ``r`` on a linear of ``in x out`` features holds ``r (in + out)`` parameters (TP-split
on the base layer's split side), the frozen GEMMs run their data gradient only, and only
the adapters carry gradients, optimizer states and data-parallel traffic.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.api import resolve, simulate_resolved
from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.hardware import Topology
from simulator.memory import estimate_memory
from simulator.metrics.flops import forward_flops_per_sequence, model_flops_per_step
from simulator.shape.lora import adapter_params_per_layer
from simulator.validation.cases import load_cases
from simulator.validation.predict import predict_step_time
from simulator.workload.chunk_cost import ChunkCoster
from simulator.workload.ops import backward_of, layer_forward
from simulator.workload.plan import build_plan
from simulator.workload.wgrad import wgrad_ops

H, Q, KV, FFN, L, R = 4096, 4096, 1024, 14336, 32, 16
MODEL = {"name": "llama3-8b", "num_layers": L, "hidden_size": H, "num_attention_heads": 32,
         "num_query_groups": 8, "ffn_hidden_size": FFN, "gated_linear_unit": True,
         "vocab_size": 128256, "seq_length": 4096, "hidden_dropout": 0.0,
         "attention_dropout": 0.0, "untie_embeddings_and_output_weights": True}
BASE = {"model": MODEL, "parallelism": {"tensor": 1, "pipeline": 1, "data": 1},
        "training": {"global_batch_size": 16, "micro_batch_size": 2, "precision": "bf16",
                     "peft": "lora", "lora_dim": R}}
# r (in + out) per target: qkv h -> q+2kv, proj q -> h, fc1 h -> 2 ffn, fc2 ffn -> h
PER_LAYER = R * ((H + Q + 2 * KV) + (Q + H) + (H + 2 * FFN) + (FFN + H))


def _w(over: dict | None = None):
    return resolve(BASE, "dgx-h100", over or {}, {})


def test_adapter_parameters_closed_form_and_tp_split():
    w, _ = _w()
    assert adapter_params_per_layer(w) == PER_LAYER
    # TP 2: column-parallel bases split B (the output), row-parallel ones split A (the input)
    tp2, _ = _w({"parallelism.tensor": 2})
    want = R * ((H + (Q + 2 * KV) / 2) + (Q / 2 + H) + (H + 2 * FFN / 2) + (FFN / 2 + H))
    assert adapter_params_per_layer(tp2) == want
    only_attn, _ = _w({"training.lora_target_modules": ["linear_qkv", "linear_proj"]})
    assert adapter_params_per_layer(only_attn) == R * ((H + Q + 2 * KV) + (Q + H))


def test_only_the_adapters_carry_gradients_and_optimizer_states():
    w, t = _w()
    full, _ = _w({"training.peft": "none"})
    topo = Topology.from_config(t)
    lora_mem, full_mem = estimate_memory(w, topo).stages[0], estimate_memory(full, topo).stages[0]
    adapters = PER_LAYER * L
    assert lora_mem.gradients == pytest.approx(4.0 * adapters)  # fp32 main grads
    assert lora_mem.optimizer == pytest.approx(12.0 * adapters)  # fp32 params + Adam moments
    assert lora_mem.parameters == pytest.approx(full_mem.parameters + 2.0 * adapters)
    assert lora_mem.gradients < full_mem.gradients / 100


def test_frozen_gemms_run_only_their_data_gradient():
    w, _ = _w()
    fwd = layer_forward(w)
    bwd = backward_of(fwd)
    base = {o.name: o for o in fwd if o.kind == "gemm"}
    back = {o.name: o for o in bwd if o.kind == "gemm"}
    for name in ("qkv", "attn_proj", "fc1", "fc2"):
        assert base[name].frozen
        assert back[name + "_bwd"].flops == pytest.approx(base[name].flops)  # dgrad only
        a, b = base[name + "_lora_a"], base[name + "_lora_b"]
        assert not a.frozen and back[name + "_lora_a_bwd"].flops == pytest.approx(2 * a.flops)
        assert back[name + "_lora_b_bwd"].flops == pytest.approx(2 * b.flops)
    # the adapters' forward GEMMs: 2 T r (in + out) per target
    T = 2 * 4096
    adapter = sum(o.flops for n, o in base.items() if "_lora_" in n)
    assert adapter == pytest.approx(2 * T * PER_LAYER)
    # zero-bubble schedules defer weight gradients: a frozen GEMM has none
    assert {o.name for o in wgrad_ops(fwd)} == {n + "_wgrad" for n in base if "_lora_" in n}



def test_a_frozen_embedding_runs_no_backward():
    # the embedding's backward is its weight gradient (token ids take none): LoRA freezes it
    w, t = _w()
    full, _ = _w({"training.peft": "none"})
    topo = Topology.from_config(t)
    assert ChunkCoster(w, topo).embed[1].duration == 0.0
    assert ChunkCoster(full, topo).embed[1].duration > 0.0
    assert ChunkCoster(w, topo).embed[0].duration == ChunkCoster(full, topo).embed[0].duration

def test_model_flops_are_forward_plus_data_gradient():
    w, _ = _w()
    seq = forward_flops_per_sequence(w)
    adapters = 2 * 4096 * PER_LAYER * L
    assert model_flops_per_step(w) == pytest.approx((2 * seq + 3 * adapters) * 16)
    full, _ = _w({"training.peft": "none"})
    assert model_flops_per_step(full) == pytest.approx(3 * seq * 16)


def test_data_parallel_syncs_only_the_adapters():
    w, t = _w({"parallelism.data": 8, "training.global_batch_size": 64})
    topo = Topology.from_config(t)
    plan = build_plan(w, topo)
    synced = sum(b for chunk in plan.engine_input.dp_bucket_bytes[0] for b in chunk)
    # bf16 parameters reduce fp32 gradients by default (Megatron's main_grad)
    assert synced == pytest.approx(4.0 * PER_LAYER * L, rel=1e-9)


def test_lora_is_faster_and_lighter_than_full_fine_tuning():
    w, t = _w()
    full, tf = _w({"training.peft": "none"})
    lora_r, full_r = simulate_resolved(w, t)[0], simulate_resolved(full, tf)[0]
    assert lora_r.step_time_s < full_r.step_time_s
    assert lora_r.memory_per_gpu_GB < full_r.memory_per_gpu_GB / 2
    assert 0 < lora_r.hfu <= 1 and 0 < lora_r.mfu <= 1


def test_dropout_costs_bytes_and_memory_where_it_runs():
    w, t = _w()
    topo = Topology.from_config(t)
    base = estimate_memory(w, topo).stages[0].activations
    pre, _ = _w({"training.lora_dropout": 0.1})
    post, _ = _w({"training.lora_dropout": 0.1, "training.lora_dropout_position": "post"})
    tokens = 2 * 4096 * L
    outputs = (Q + 2 * KV) + H + 2 * FFN + H
    # pre: a 1-byte mask and the dropped 16-bit copy of each input, which A then keeps
    # instead of the input itself (QKV, FC1, FC2: +1 byte an element); the output
    # projection's input is the attention output its kernel keeps anyway (+3); post: the
    # output's mask
    assert estimate_memory(pre, topo).stages[0].activations - base == \
        pytest.approx(tokens * (3 * Q + (H + H + FFN)))
    assert estimate_memory(post, topo).stages[0].activations - base == \
        pytest.approx(tokens * outputs)


def test_an_adapter_dropout_backward_moves_its_forward_bytes():
    # PyTorch's dropout backward is one masked scale (read the gradient and the 1-byte mask,
    # write the input gradient): the forward's bytes, not a norm's twice
    for position, width in (("pre", H), ("post", 2 * FFN)):
        w, _ = _w({"training.lora_dropout": 0.1, "training.lora_dropout_position": position})
        fwd = layer_forward(w)
        drop = next(o for o in fwd if o.name == "fc1_lora_dropout")
        assert drop.nbytes == pytest.approx(2 * 4096 * width * 5.0)
        bwd = next(o for o in backward_of(fwd) if o.name == "fc1_lora_dropout_bwd")
        assert bwd.nbytes == pytest.approx(drop.nbytes)


def test_dropout_position_defaults_to_the_stacks_own():
    # Megatron-Bridge's LoRA drops the adapter's input (pre), NeMo AutoModel's its output
    # (post; stacks/*.yaml peft.lora_dropout_position); a run's own setting wins
    def acts(over):
        w, t = _w({"training.lora_dropout": 0.1, **over})
        return estimate_memory(w, Topology.from_config(t)).stages[0].activations
    pre = acts({"training.lora_dropout_position": "pre"})
    post = acts({"training.lora_dropout_position": "post"})
    assert pre != post
    assert acts({}) == pre  # megatron, the default stack
    assert acts({"training.stack": "nemo-automodel"}) == acts(
        {"training.stack": "nemo-automodel", "training.lora_dropout_position": "post"})
    assert acts({"training.stack": "nemo-automodel", "training.lora_dropout_position": "pre"}) \
        == pytest.approx(acts({"training.stack": "nemo-automodel"}) + pre - post)
    with pytest.raises(ConfigError, match=r"peft\.lora_dropout_position.*pre or post"):
        simulate_resolved(*_w({"training.lora_dropout": 0.1, "training.stack_settings":
                               {"peft.lora_dropout_position": "middle"}}))


def test_lora_on_what_it_does_not_cost_is_one_line(capsys):
    moe = {"model.moe": {"num_experts": 8, "router_topk": 2, "ffn_hidden_size": 1024}}
    with pytest.raises(ConfigError, match=r"training\.lora_target_modules.*expert adapters"):
        _w(moe)  # the default targets include the MLPs
    with pytest.raises(ConfigError, match=r"training\.lora_target_modules"):
        _w({"training.lora_target_modules": ["linear_qkv", "linear_qkv"]})
    assert main(["run", "mixtral-8x7b", "-t", "dgx-h100", "--set", "training.peft=lora"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.lora_target_modules" in err[0]
    assert main(["run", "llama3-8b", "-t", "dgx-h100", "--set", "training.peft=lora",
                 "--set", "training.lora_dim=0"]) == 2
    assert "training.lora_dim" in capsys.readouterr().err
    assert main(["memory", "llama3-8b", "-t", "dgx-h100", "--set", "training.peft=lora"]) == 0
    assert "LoRA dim 32 on linear_qkv, linear_proj, linear_fc1, linear_fc2: base frozen" in \
        capsys.readouterr().out


def test_a_frozen_linear_keeps_no_input():
    """Transformer Engine saves a linear's input only for its weight gradient
    (``backward_needs_input = is_grad_enabled and weight.requires_grad``): under LoRA the
    frozen bases keep none, a target's adapter keeps the 16-bit input its A reads."""
    topo = Topology.from_config(_w()[1])
    tokens = 2 * 4096 * L

    def acts(over):
        return estimate_memory(_w(over)[0], topo).stages[0].activations

    full = {"training.peft": "none"}
    qkv = {"training.lora_target_modules": ["linear_qkv"]}
    # bf16, every target: the same inputs as full training, plus A's outputs
    assert acts({}) - acts(full) == pytest.approx(tokens * 2 * R * 4)
    # bf16, QKV only: no FC1 input (h) or FC2 input (ffn) kept
    assert acts(qkv) - acts(full) == pytest.approx(tokens * (2 * R - 2 * H - 2 * FFN))
    # FP8: full training keeps 1-byte copies of the four inputs (the projection's beside the
    # attention's 16-bit output); LoRA on QKV keeps its adapter's 16-bit input only
    fp8 = {"training.precision": "fp8", "training.fp8_recipe": "tensorwise"}
    assert acts({**fp8, **qkv}) - acts({**fp8, **full}) == \
        pytest.approx(tokens * (2 * R + (2 - 1) * H - H - Q - FFN))


MOE = {"model.moe": {"num_experts": 8, "router_topk": 2, "ffn_hidden_size": 4096,
                     "router_load": "uniform"},
       "parallelism.expert": 1}
ATTN = {"training.lora_target_modules": ["linear_qkv", "linear_proj"]}


def test_lora_on_a_moe_model_freezes_its_experts():
    """Adapters on the attention only; the routed experts freeze like the base: no
    gradients or optimizer states, no expert-DP traffic, a data-gradient-only backward
    (their weight-gradient GEMMs gone), no saved expert inputs, nothing for a zero-bubble
    schedule to defer."""
    w, t = _w({**MOE, **ATTN})
    full, _ = _w({**MOE, "training.peft": "none"})
    topo = Topology.from_config(t)
    lora_plan, full_plan = build_plan(w, topo), build_plan(full, topo)
    sp = lora_plan.shape.params[0]
    assert sp.expert > 0 and sp.trainable.expert == 0.0
    adapters = R * ((H + Q + 2 * KV) + (Q + H)) * L
    lora_mem = estimate_memory(w, topo).stages[0]
    assert lora_mem.gradients == pytest.approx(4.0 * adapters)
    assert lora_mem.optimizer == pytest.approx(12.0 * adapters)
    # the experts' backward: the forward's GEMMs once (data gradient), not twice
    moe_l, moe_f = lora_plan.moe, full_plan.moe
    kept = np.full(8, 4096)
    gemms = moe_f._expert_gemms(kept).sum()
    assert moe_f.expert_seconds(kept, True).sum() - moe_l.expert_seconds(kept, True).sum() \
        == pytest.approx(gemms)
    assert moe_l.expert_seconds(kept, False).sum() == moe_f.expert_seconds(kept, False).sum()
    # the experts keep no dispatched FC1 input and no FC2 input
    routed = 2 * 4096 * 2  # micro-batch x sequence x top-k, uniform
    assert estimate_memory(full, topo).stages[0].activations \
        - lora_mem.activations > routed * (H + 4096) * 2 * L * 0.99
    lora_r, full_r = simulate_resolved(w, t)[0], simulate_resolved(full, t)[0]
    assert lora_r.step_time_s < full_r.step_time_s and 0 < lora_r.hfu <= lora_r.mfu <= 1
    # a zero-bubble schedule defers the adapters' weight gradients only
    zb = {"parallelism.pipeline": 2, "parallelism.data": 1,
          "parallelism.pipeline_schedule": "zb_h1"}
    wz, _ = _w({**MOE, **ATTN, **zb})
    fz, _ = _w({**MOE, "training.peft": "none", **zb})
    w_lora = build_plan(wz, topo).engine_input.wgrad.sum()
    w_full = build_plan(fz, topo).engine_input.wgrad.sum()
    adapters_w = ChunkCoster(wz, topo).w_moe_base  # one layer's adapter weight gradients
    assert adapters_w > 0
    assert w_lora == pytest.approx(adapters_w * L * wz.num_microbatches)
    assert w_lora < 0.05 * w_full


def test_moe_lora_from_the_command_line(capsys):
    attn = ["--set", "training.peft=lora", "--set",
            "training.lora_target_modules=[linear_qkv,linear_proj]"]
    assert main(["memory", "mixtral-8x7b", "-t", "dgx-h100", *attn]) == 0
    assert "linear_qkv, linear_proj: base and experts frozen" in capsys.readouterr().out
    assert main(["run", "mixtral-8x7b", "-t", "dgx-h100", *attn, "--format", "json"]) == 0
    lora = json.loads(capsys.readouterr().out)
    assert main(["run", "mixtral-8x7b", "-t", "dgx-h100", "--format", "json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert lora["step_time_s"] < full["step_time_s"]
    assert lora["memory_per_gpu_GB"] < full["memory_per_gpu_GB"]


def test_the_shipped_lora_example_is_the_validated_recipe(capsys):
    """workloads/llama3-70b-lora.yaml is the 26.06 Megatron-Bridge GB200 LoRA recipe: it
    predicts what its validation case predicts (validation/megatron_bridge/lora.yaml)."""
    folder = Path(__file__).resolve().parents[1] / "validation" / "megatron_bridge"
    case = next(c for c in load_cases(folder) if c.id == "mbridge2606-llama3-70b-lora-gb200-8g-fp8")
    w, t = resolve("llama3-70b-lora", "gb200-nvl72", {}, {})
    assert simulate_resolved(w, t)[0].step_time_s == pytest.approx(predict_step_time(case),
                                                                   rel=1e-9)
    assert main(["run", "llama3-70b-lora", "-t", "gb200-nvl72"]) == 0
    assert ", LoRA, packed documents of 230 tokens" in capsys.readouterr().out.splitlines()[0]
