"""Fused-attention kernel efficiency by kernel family, sequence length and head dim.

Returns the achieved fraction of the GPU's dense bf16 peak (dimensionless) for one fused
(flash) attention kernel, forward and backward together, as the rest of
:mod:`simulator.compute` does for GEMMs. Families:

* ``te`` / ``cudnn``: Transformer Engine's DotProductAttention (cuDNN fused attention). Its
  efficiency is the topology's fitted ``gpu.attention_efficiency`` (topologies/*.yaml), which
  holds for the sequences it was fitted on (2K-8K causal, head dim 128-192); a kernel whose
  work per query row is shorter than the shortest of them (context-parallel blocks, short
  sequences, sliding windows) runs at the tile-fill fraction below, relative to that length,
  and one with a head dim below the fit set's 128 at the head-dim factor below (relative to
  128, never above 1: the fitted value already stands for 128-192).
* ``fa2``: FlashAttention-2 (also PyTorch SDPA's flash backend). Measured, not fitted:
  H100 0.35 of the bf16 peak ("FlashAttention-2 achieves only 35% utilization on the H100",
  Shah et al. 2024, FlashAttention-3, abstract; Azure AI-benchmarking-guide measured 327.9
  TFLOP/s = 0.33, shared/validation/kernels.yaml; PyTorch SDPA's flash backend 329 TFLOP/s
  at batch 1, 24 heads, 4608 tokens, hdim 128, pytorch/pytorch#142132); A100 179.5 TFLOP/s = 0.575 of 312
  (Azure, same file; within Dao 2023's "50-73 % of the theoretical maximum").
* ``fa3``: FlashAttention-3 (Hopper only): forward 600-660 and backward 450-550 TFLOP/s at
  head dim 128 and 8K-16K (Shah et al. 2024, Figs. 5-6, read off the plots, +-10 %), 0.55
  of 989 over forward + 2.5x backward FLOPs.

Tile fill: a query row's work grows with the keys it sees, ``s_eff`` (the key length,
half of it under a causal mask), and fixed per-tile costs (softmax rescaling, loads of Q,
the epilogue) amortise over it: ``s_eff / (s_eff + s_half)`` with ``s_half`` = 512 keys
causal and 160 non-causal (FA3 Fig. 5, H100 bf16 hdim 128: causal forward reaches ~1/3 of
its 16K rate at 512 tokens and ~0.85 at 4K; non-causal ~0.77 at 512). Head dim:
``d / (d + 32)`` relative to 128 (FA3 Fig. 5: hdim 64 runs at ~0.8, hdim 256 at ~1.1 of
hdim 128). Grouped-query attention shares K/V tiles across query heads inside the kernel
and does not change its rate (FA2/FA3 kernels take GQA natively); the caller counts FLOPs
by query heads.
"""

from __future__ import annotations

from ..hardware import GPU

FAMILIES = ("te", "cudnn", "fa2", "fa3")
# Saturated efficiency (fraction of dense bf16 peak) by family and architecture; sources
# in the module docstring. A family without a figure for an architecture falls back to te.
MEASURED = {
    ("fa2", "hopper"): 0.35,
    ("fa2", "ampere"): 0.575,
    ("fa3", "hopper"): 0.55,
}
S_HALF_CAUSAL = 512.0  # keys per query row at which a causal kernel runs at half rate
S_HALF_FULL = 160.0  # same, no mask
D_HALF = 32.0  # head dim at which the per-row rate halves
TE_REF_S_EFF = 1024.0  # the fit set's shortest sequence (2048, causal): s_eff = 1024


def arch(gpu: GPU) -> str:
    """``ampere`` / ``hopper`` / ``blackwell`` from the GPU's name (A100, H100/H200/H800,
    B200/GB200/GB300); ``other`` otherwise."""
    n = gpu.name.upper()
    if n.startswith("A100") or n.startswith("A800"):
        return "ampere"
    if n.startswith(("H100", "H200", "H800", "GH200")):
        return "hopper"
    if n.startswith(("B200", "GB200", "B300", "GB300")):
        return "blackwell"
    return "other"


def tile_fill(s_eff: float, causal: bool) -> float:
    """``s_eff / (s_eff + s_half)``: the per-row amortisation of a flash kernel (0..1)."""
    half = S_HALF_CAUSAL if causal else S_HALF_FULL
    return s_eff / (s_eff + half) if s_eff > 0 else 0.0


def head_factor(d: float) -> float:
    """Rate at head dim ``d`` relative to 128: ``(d/(d+32)) / (128/160)``."""
    return (d / (d + D_HALF)) / (128.0 / (128.0 + D_HALF)) if d > 0 else 1.0


def kernel_efficiency(family: str, gpu: GPU, s_k: float, d: float, causal: bool) -> float:
    """Achieved fraction of the bf16 peak of a fused attention kernel (dimensionless).

    ``s_k``: keys each query row attends to before masking; ``d``: head dim; ``causal``:
    the block is on the diagonal (half its square masked). See the module docstring.
    """
    s_eff = s_k * (0.5 if causal else 1.0)
    measured = MEASURED.get((family, arch(gpu)))
    if measured is None:  # te / cudnn, or a family with no figure for this GPU
        ref = tile_fill(TE_REF_S_EFF, True)
        return (gpu.attention_efficiency * min(1.0, tile_fill(s_eff, causal) / ref)
                * min(1.0, head_factor(d)))
    return measured * tile_fill(s_eff, causal) * head_factor(d)
