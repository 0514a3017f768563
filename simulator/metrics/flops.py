"""Model FLOPs per step, the numerator of MFU.

Per sequence forward, for each layer: QKV ``2*s*h*(a+2g)*d``, projection
``2*s*a*d*h``, MLP ``2*s*h*ffn`` per matrix, attention ``4*s^2*a*d`` (unmasked,
the PaLM / Megatron convention), plus the logits ``2*s*h*V``. Training is 3x
the forward (Kaplan et al. 2020; Narayanan et al. 2021 Eq. 3 without the
recompute term). For GPT-3 175B at s=2048 this gives 2.20e15 FLOPs per
sequence, NVIDIA's published figure.
"""

from __future__ import annotations

from ..config.workload import Workload
from ..moe import is_moe_layer


def forward_flops_per_sequence(w: Workload) -> float:
    m = w.model
    s, h, a, g, d = m.seq_length, m.hidden_size, m.num_attention_heads, m.groups, m.head_dim
    mats = 3 if m.gated_linear_unit else 2
    attn = 2 * s * h * (a + 2 * g) * d + 2 * s * a * d * h + 4 * s * s * a * d
    dense_mlp = 2 * s * h * m.ffn * mats
    layers = m.num_layers * (attn + dense_mlp)
    if m.moe is not None:
        moe = m.moe
        n_moe = moe_layer_count(w)
        eff = (moe.ffn_hidden_size or m.ffn) * moe.router_topk + moe.shared_expert_ffn_hidden_size
        layers += n_moe * (2 * s * h * eff * mats + 2 * s * h * moe.num_experts - dense_mlp)
    return layers + 2 * s * h * m.vocab_size


def moe_layer_count(w: Workload) -> int:
    moe = w.model.moe
    if moe is None:
        return 0
    return sum(1 for i in range(w.model.num_layers) if is_moe_layer(moe, i))


def model_flops_per_step(w: Workload) -> float:
    return 3.0 * forward_flops_per_sequence(w) * w.training.global_batch_size
