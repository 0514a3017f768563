"""LoRA's sizes: target linears, adapter parameters and kept bytes per GPU.

What a LoRA fine-tune holds and keeps follows from the workload's sizes alone; the ops it
runs are in :mod:`simulator.workload.lora` (whose docstring gives the model and sources).
Per GPU after the TP split: a column-parallel base (``linear_qkv``, ``linear_fc1``) keeps
``A`` whole and splits ``B`` by output, a row-parallel one (``linear_proj``, ``linear_fc2``)
splits ``A`` by input and keeps ``B`` whole (NeMo AutoModel's ``LinearLoRA`` on a TP-sharded
base; Megatron-Bridge's split differs, :mod:`simulator.workload.lora`).
Units: elements per GPU; bytes where named.
"""

from __future__ import annotations

from ..config.stacks import run_stack
from ..config.workload import Workload

# Megatron-Core module name -> the op name of its GEMM (simulator/workload/ops.py), and
# whether the base layer is column-parallel (output split over TP) or row-parallel
TARGETS: dict[str, tuple[str, bool]] = {"linear_qkv": ("qkv", True),
                                        "linear_proj": ("attn_proj", False),
                                        "linear_fc1": ("fc1", True),
                                        "linear_fc2": ("fc2", False)}


# the targets a MoE model may take: its MLPs (routed and shared experts, dense layers) freeze
ATTENTION = frozenset({"linear_qkv", "linear_proj"})


def enabled(w: Workload) -> bool:
    """Whether ``w`` fine-tunes with LoRA (``training.peft: lora``)."""
    return w.training.peft == "lora"


def whole_io(w: Workload) -> dict[str, tuple[float, float]]:
    """(input, output) features of each target linear, whole (before TP)."""
    m = w.model
    d = m.head_dim
    mats = 2 if m.gated_linear_unit else 1
    return {"linear_qkv": (m.hidden_size, (m.num_attention_heads + 2 * m.groups) * d),
            "linear_proj": (m.num_attention_heads * d, m.hidden_size),
            "linear_fc1": (m.hidden_size, m.ffn * mats),
            "linear_fc2": (m.ffn, m.hidden_size)}


def local_io(w: Workload) -> dict[str, tuple[float, float]]:
    """(input, output) features one GPU's adapter of each target sees (module docstring)."""
    t = w.parallelism.tensor
    out = {}
    for name in w.training.lora_target_modules:
        i, o = whole_io(w)[name]
        out[name] = (i, o / t) if TARGETS[name][1] else (i / t, o)
    return out


def adapter_params_per_layer(w: Workload) -> float:
    """Adapter parameters of one decoder layer on one GPU, ``sum r * (in + out)`` over the
    targets with the TP split of :func:`local_io`; 0 without LoRA."""
    if not enabled(w):
        return 0.0
    r = w.training.lora_dim
    return sum(r * (i + o) for i, o in local_io(w).values())


def model_adapter_params_per_layer(w: Workload) -> float:
    """Adapter parameters of one decoder layer of the whole model (before any TP split),
    ``sum r * (in + out)`` over the targets; 0 without LoRA."""
    if not enabled(w):
        return 0.0
    r = w.training.lora_dim
    return sum(r * sum(whole_io(w)[name]) for name in w.training.lora_target_modules)


def dropout_position(w: Workload) -> str:
    """Where the adapters' dropout acts: the run's ``training.lora_dropout_position``, else
    its stack's default (``peft.lora_dropout_position`` of stacks/*.yaml: ``pre`` on the
    adapter's input, Megatron-Bridge's; ``post`` on its output, NeMo AutoModel's)."""
    tr = w.training
    return tr.lora_dropout_position or run_stack(tr).lora_dropout_position


def activation_bytes_per_token(w: Workload) -> float:
    """Bytes the adapters of one layer keep per token through its GEMMs for the backward:
    ``A``'s 16-bit output (``2 r``), and with dropout its 1-byte mask of the tensor it drops
    (the input ``pre``, the output ``post``) and, ``pre``, the dropped 16-bit input ``A``
    reads. 0 without LoRA."""
    if not enabled(w):
        return 0.0
    tr = w.training
    pre = dropout_position(w) == "pre"
    out = 0.0
    for i, o in local_io(w).values():
        out += 2.0 * tr.lora_dim
        if tr.lora_dropout > 0:
            out += i * 3.0 if pre else o * 1.0
    return out


def problem(w: Workload) -> tuple[str, str] | None:
    """(field, why) where LoRA is asked of a model or setting it is not costed for, else
    None."""
    if not enabled(w):
        return None
    m, tr = w.model, w.training
    if m.moe is not None and not set(tr.lora_target_modules) <= ATTENTION:
        return ("training.lora_target_modules",
                "on a MoE model LoRA is costed on the attention linears only (linear_qkv, "
                "linear_proj; the experts, router and MLPs frozen): expert adapters are not "
                "costed")
    if m.multi_latent_attention:
        return "training.peft", "LoRA is costed for standard attention, not multi-latent"
    if len(set(tr.lora_target_modules)) != len(tr.lora_target_modules):
        return "training.lora_target_modules", "must name each module once"
    if tr.recompute_plan.has("op_sac"):
        return "training.peft", "LoRA with torchtitan's per-op checkpointing is not costed"
    return None
