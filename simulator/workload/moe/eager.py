"""Eager elementwise kernels around the routed experts' grouped GEMMs (GPT-OSS style experts).

Two Megatron-Core expert features run outside the grouped GEMMs and the fused activation
as separate PyTorch kernels over every routed token (``TEGroupedMLP.forward`` in
megatron/core/transformer/moe/experts.py and ``weighted_bias_quick_geglu_impl`` in
megatron/core/fusions/fused_bias_geglu.py, identical at Megatron-LM 2d398b42 (Megatron-Bridge
25.11), 23dd639c (26.02) and 23265d2d (26.04)):

* **Clamped GLU** (``activation_func_clamp_value``; GPT-OSS 7.0): before the jit-fused
  weighted activation, ``input.chunk(2)``, ``x_glu.clamp(max=v)``, ``x_linear.clamp(-v, v)``
  and ``torch.cat`` of the two halves. Forward: each clamp reads and writes its half, the
  cat reads and writes the whole ``[n, 2f]`` FC1 output: ``4 * e`` bytes per element of
  ``[n, 2f]`` (``e`` = 2 bytes, bf16), 3 kernels. Backward (autograd): each
  clamp's masked gradient reads the gradient and the saved input and writes the gradient
  (``3 * e``), and the chunk's backward concatenates the two halves' gradients (``2 * e``):
  ``5 * e`` bytes per element, 3 kernels (a lower bound: PyTorch's ``clamp_backward``
  builds its mask with separate comparison kernels). Under ``moe_act`` recompute the clamp
  is inside the checkpointed function and runs again.
* **Expert FC2 bias** (``add_bias_linear``): FC2 is built with ``skip_bias_add=True`` and its
  bias, scaled by each token's routing probability, is added by ``_apply_bias``: per local
  expert ``t + b * p`` over that expert's rows, then ``torch.cat`` of all experts' rows.
  Forward per element of ``[n, h]``: ``b * p`` writes ``e``, the add reads ``2e`` and writes
  ``e``, the cat reads and writes ``e`` each: ``6 * e`` bytes; 2 kernels per local expert
  and one cat. Backward: the bias gradient ``(g * p).sum(0)`` and the probability gradient
  ``(g * b).sum(-1)``, each a product (read ``e``, write ``e``) and a reduction (read ``e``):
  ``6 * e`` bytes, 4 kernels per local expert. Probabilities in bf16 (no
  ``moe_router_dtype`` in the GPT-OSS recipes; an fp32 router would move more). The FC1
  bias is added in the GEMM (``skip_bias_add=False``: Transformer Engine's bias epilogue)
  and costs nothing here.

With ``use_transformer_engine_op_fuser`` the experts run as Transformer Engine ops
(``TEGroupedMLP._make_fused_ops``: ``ScaledClampedQGeGLU(limit=...)`` and
``GroupedLinear(..., scale_bias=True)``), and neither costs an eager kernel.

Units: bytes of HBM traffic per routed row (token assignment) and kernels; seconds are the
roofline of :func:`simulator.compute.memory_time` (HBM bandwidth x STREAM efficiency) plus
``gpu.kernel_overhead_s`` per kernel.

Host: the kernels are charged to the GPU only, not to the host launch model
(:mod:`.host`). Its ``gpu.host_launch_us`` (53 us on H100) is fitted per *counted* kernel
on cases that include the GPT-OSS rows with these kernels uncounted, so it is an average
over Megatron-Core's Python per module, not the dispatch cost of one small PyTorch op;
charging the ~36 forward / ~64 backward eager kernels per layer at that rate predicts the
GPT-OSS H100 MBS 1 rows +22.6 / +19.1 % slow, which the MBS 4 row (same kernels per
micro-batch, 4x the tokens, -11 % with GPU time alone) does not support. An Nsight trace
would settle how long the host takes for them (validation/analysis.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...compute import BYTES
from ...config.workload import Workload

CLAMP_FWD_ELEMENT_BYTES = 4  # x e, per element of the [n, 2f] FC1 output
CLAMP_BWD_ELEMENT_BYTES = 5
CLAMP_FWD_KERNELS = 3  # two clamps, one cat
CLAMP_BWD_KERNELS = 3  # two masked gradients, one cat
BIAS_FWD_ELEMENT_BYTES = 6  # x e, per element of the [n, h] FC2 output
BIAS_BWD_ELEMENT_BYTES = 6
BIAS_FWD_KERNELS_PER_EXPERT = 2  # b * p, t + (b * p)
BIAS_BWD_KERNELS_PER_EXPERT = 4  # two products, two reductions


@dataclass(frozen=True)
class EagerExpertOps:
    """Bytes per routed row and kernel launches of the eager expert kernels of one rank.

    ``*_row_bytes``: HBM bytes per routed token (row) of one expert, forward / backward /
    recompute; ``*_kernels``: kernels per expert (``per_expert``) and per rank (``fixed``).
    """

    fwd_row_bytes: float = 0.0
    bwd_row_bytes: float = 0.0
    redo_row_bytes: float = 0.0  # re-run under moe_act recompute (the clamp)
    fwd_kernels_per_expert: float = 0.0
    bwd_kernels_per_expert: float = 0.0
    fwd_kernels_fixed: float = 0.0
    bwd_kernels_fixed: float = 0.0

    @property
    def any(self) -> bool:
        return self.fwd_row_bytes > 0


def eager_expert_ops(w: Workload, ffn_local: float, h: int) -> EagerExpertOps:
    """The eager kernels of ``w``'s routed experts (module docs); none with the TE op fuser.

    ``ffn_local``: expert FFN width per expert-tensor rank (``f``); ``h``: hidden size.
    """
    m, tr = w.model, w.training
    if m.moe is None or tr.use_transformer_engine_op_fuser:
        return EagerExpertOps()
    e = BYTES["bf16"]
    glu_width = ffn_local * (2 if m.gated_linear_unit else 1)
    fwd = bwd = redo = 0.0
    kf = kb = fixed_f = fixed_b = 0.0
    if m.activation_func_clamp_value is not None:
        fwd += CLAMP_FWD_ELEMENT_BYTES * e * glu_width
        bwd += CLAMP_BWD_ELEMENT_BYTES * e * glu_width
        fixed_f += CLAMP_FWD_KERNELS
        fixed_b += CLAMP_BWD_KERNELS
        rc = tr.recompute_plan
        if rc.has("moe_act") and not rc.full and not rc.has("moe"):
            redo = CLAMP_FWD_ELEMENT_BYTES * e * glu_width
    if m.add_bias_linear:
        fwd += BIAS_FWD_ELEMENT_BYTES * e * h
        bwd += BIAS_BWD_ELEMENT_BYTES * e * h
        kf += BIAS_FWD_KERNELS_PER_EXPERT
        kb += BIAS_BWD_KERNELS_PER_EXPERT
        fixed_f += 1  # the cat of every expert's rows
    return EagerExpertOps(fwd, bwd, redo, kf, kb, fixed_f, fixed_b)
