"""Fused-attention kernel efficiency by kernel family, sequence length and head dim.

Returns the achieved fraction of the GPU's dense bf16 peak (dimensionless) for one fused
(flash) attention kernel, forward and backward together, as the rest of
:mod:`simulator.compute` does for GEMMs. Families:

* ``te`` / ``cudnn``: Transformer Engine's DotProductAttention (cuDNN fused attention). On
  Hopper (H100 / H200 / H800) and Blackwell (B200 / GB200 / GB300) ``gpu.attention_efficiency``
  is the *saturated* rate of the cuDNN SDPA kernel measured in isolation (not fitted on
  training steps, see :data:`CUDNN_H200` and :data:`BLACKWELL`), and the architecture's tile
  fill and the head-dim factor below apply in full, as for ``fa2`` / ``fa3``. On Ampere and
  other GPUs it is the topology's fitted value, which holds for the sequences it was fitted on
  (2K-8K causal, head dim 128-192); a kernel whose work per query row is shorter than the
  shortest of them (context-parallel blocks, short sequences, sliding windows) runs at the
  tile-fill fraction below, relative to that length, and one with a head dim below the fit
  set's 128 at the head-dim factor below (relative to 128, never above 1: the fitted value
  already stands for 128-192).
* ``fa2``: FlashAttention-2 (also PyTorch SDPA's flash backend). Measured, not fitted:
  H100 0.35 of the bf16 peak ("FlashAttention-2 achieves only 35% utilization on the H100",
  Shah et al. 2024, FlashAttention-3, abstract; Azure AI-benchmarking-guide measured 327.9
  TFLOP/s = 0.33, shared/validation/kernels.yaml; PyTorch SDPA's flash backend 329 TFLOP/s
  at batch 1, 24 heads, 4608 tokens, hdim 128, pytorch/pytorch#142132). A forward + backward
  causal benchmark of PyTorch's flash backend on H200 (cudnn-frontend
  ``benchmark/benchmark_results.csv``, commit de355c7, 2024-09-23; 16 heads, head dim 128,
  1,980 MHz: 0.261 / 0.290 / 0.315 / 0.328 / 0.332 of 989 at 4K-64K, :data:`FA2_H200`) gives
  a saturated 0.332 at Hopper's tile fill, 5 % lower. The sources disagree by that much; 0.35
  is kept, and with 0.332 the never-fitted H100 rows of validation/stacks/ (FA2 runs: NeMo
  24.03 long sequences, torchtitan, AutoModel) move from a 2.3 to a 4.6 % median, the long-
  sequence ones from within 2.5 % to +2 .. +6 % (a choice between two sources by the
  validation error, stated as such). A100 179.5 TFLOP/s = 0.575 of 312
  (Azure, same file; within Dao 2023's "50-73 % of the theoretical maximum").
* ``triton``: FlashAttention in Triton, flash-attention's experimental
  ``flash_attn_triton.py`` (2022; "only been tested on A100"), which llm-foundry vendors as
  ``llmfoundry/models/layers/flash_attn_triton.py`` for MPT's ``attn_impl: triton``.
  Measured against FlashAttention-2 on A100 by Dao 2023 (Sec. 4.1: FlashAttention-2 "is
  around 1.3-1.5x faster than FlashAttention in Triton in the forward pass and around 2x
  faster in the backward pass"): forward at 1/1.4, backward at 1/2 of ``fa2``'s A100 rate,
  0.547 of it over forward + 2.5x backward FLOPs. No other GPU has a figure: on one it is an
  error naming ``training.attention_family``.
* ``fa3``: FlashAttention-3 (Hopper only): forward 600-660 and backward 450-550 TFLOP/s at
  head dim 128 and 8K-16K (Shah et al. 2024, Figs. 5-6, read off the plots, +-10 %), 0.55
  of 989 over forward + 2.5x backward FLOPs.

Tile fill: a query row's work grows with the keys it sees, ``s_eff`` (the key length,
half of it under a causal mask), and fixed per-tile costs (softmax rescaling, loads of Q,
the epilogue) amortise over it: ``s_eff / (s_eff + s_half)`` with ``s_half`` = 512 keys
causal and 160 non-causal. The model gives a causal kernel ~1/3 of its 16K rate at 512
tokens and ~0.85 at 4K, a non-causal one ~0.77 at 512. That is the forward + backward pair,
which the backward dominates (2.5x the FLOPs): the causal forward alone fills faster
(FA3 Figs. 5-6 bar labels, H100 bf16 hdim 128: causal forward 0.47 of the 16K rate at 512
and 0.94 at 4K for FA3, 0.57 and 0.95 for FA2) and the backward slower (non-causal: 0.56
at 512 for FA3, 0.66 for FA2). The causal 512 is what the forward + backward benchmarks on
H200 below give (:data:`CUDNN_H200`: rms 1 % with it; :data:`FA2_H200`: 4K at 0.79 of the
64K rate, the model 0.81), and the non-causal 160 is checked on the unmasked cuDNN points
(within 6 %; tests/test_attention_hopper.py). Head dim:
``d / (d + 32)`` relative to 128 (FA3 Fig. 5: hdim 64 runs at ~0.8, hdim 256 at ~1.1 of
hdim 128).

Hopper cuDNN (:data:`CUDNN_H200`): the same NVIDIA cudnn-frontend benchmark on H200 (cuDNN
9.19.0; ``benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/``
``llama3.1_20260227_034703.csv``, commit df73764): bf16, batch 1, 64 query / 8 KV heads, head
dim 128, causal: combined 0.508 / 0.573 / 0.610 / 0.615 of 989 TFLOP/s at 4K / 8K / 16K / 32K.
With Hopper's FA3 tile fill (``s_half`` 512 keys, from a different kernel and paper) the
least-squares ``E`` is 0.640 (rms 1 %): the topologies' ``attention_efficiency`` of dgx-h100 and
h200 (same GH100 die, clocks and bf16 peak). The unmasked points (0.594 / 0.626 / 0.642 / 0.609)
lie within 5 % of ``E`` times the non-causal fill. Until 2026-12 this constant was fitted on the
H100 training steps jointly with the GEMM efficiency (0.599 at the bound of its range, flat in
sequence length above 2K: not identified, as the two trade against each other); the kernel
figure replaces it and the GEMM constants were refitted around it (docs/calibration-log.md).
Release: cuDNN 9.19 is later than the training cases' (NeMo 24.x-25.x containers: cuDNN
9.1-9.10), for which no Hopper benchmark on GQA shapes is published. The same repository's
earlier benchmark (``benchmark/benchmark_results.csv``, commit de355c7, 2024-09-23: cuDNN 9.1,
H200 at locked 1,980 MHz, 16 heads without GQA, batch 1-4) reached 0.483 / 0.508 / 0.532 / 0.542
/ 0.544 of the peak causal at 4K-64K: 5-12 % below the 9.19 GQA points, so a 2024 container may
run attention that much slower than this constant (release and head layout are not separable in
these two sets); FlashAttention-3 (Shah et al. 2024, Fig. 5, a 2024 kernel) reaches 600-690
forward TFLOP/s at 8K-16K, about the 9.19 rate.

Blackwell (:data:`BLACKWELL`): tensor-core throughput per SM doubled from Hopper while the
exponential units and shared-memory bandwidth that a tile's softmax and operand loads use
did not (Zadouri et al. 2026, FlashAttention-4, arXiv:2603.05451, abstract: "tensor core
throughput doubles while other functional units ... scale more slowly or remain
unchanged"), so the fixed per-tile work weighs about twice as much against the matmuls:
``s_half`` is fitted on the kernel benchmark below, 1,150 keys causal (Hopper 512), and the
non-causal one is scaled from Hopper's by the same ratio. Source: NVIDIA cudnn-frontend
``benchmark/sdpa_benchmark_training`` artifacts, B200 1,000 W, bf16, batch 1, 128 query / 8
KV heads, head dim 128, causal, 512-128K tokens: cuDNN 9.10.2 (commit 9793df5, PyTorch
25.06) and 9.13.0 (commit bb37575, PyTorch 25.09). Forward and backward combined by FLOPs
(backward 2.5x the forward), ``3.5 / (1/fwd + 2.5/bwd)``: 0.44 of the 2,250 TFLOP/s peak at
8K, 0.51 at 16K, 0.53 at 32K, 0.51 at 64K, 0.49-0.50 at 128K, the two releases within 1 %
of each other from 4K up. A least-squares fit (log error) of ``E * s_eff / (s_eff +
s_half)`` over the 12 points from 4K to 128K gives ``E`` = 0.541 and ``s_half`` = 1,150
(rms 5.5 %; the points lie within -6 % / +9 % of it: the curve does not bend down past 32K
as the measured one does). Points below 4K are left out: there the benchmark's per-call
host time (about 0.1-0.5 ms, the whole 512-token time) exceeds the kernel.
FlashAttention-2 on B200 (``fa2``; PyTorch SDPA's flash backend and flash-attn 2.7.4 in the
same benchmark, cuDNN 9.13.0 artifacts): 400-440 forward and 330-350 backward TFLOP/s from
8K to 128K; at 32K 0.155 (PyTorch) and 0.163 (flash-attn) of the peak combined, 0.17
saturated (divided by the Blackwell tile fill at 32K causal, 0.934). The benchmark counts
``4 * s^2 * heads * d`` FLOPs halved under the causal mask, as the callers here do.

GB200 runs the same B200 die: its constant is B200's saturated TFLOP/s over GB200's 2,450
peak convention. GB300 (Blackwell Ultra, doubled SFU exponential rate) has its own points
in the same benchmark (:data:`CUDNN_GB300`, cuDNN 9.13.0): 1.20-1.29x B200's combined rate
at every length, saturated 0.611 of 2,450 with the same ``s_half``.

Release: cuDNN 9.10.2 and 9.13.0 agree within 3 % from 4K up; 9.17.0 is faster (the same
benchmark on GB300, commit b372d39: 1.10x 9.13 at 32K), and FlashAttention-4 reaches up to
1.3x cuDNN 9.13 (Zadouri et al., abstract). The Blackwell constants are the 9.10-9.13 rate.
cuDNN 9.18, 9.19 and 9.22 (same repository, ``results/gb{200,300}_918_only_cudnn``,
``gb{200,300}_919_only_cudnn``, ``llama3.1/gb{200,300}``: 64 query / 8 KV heads, head dim 128,
causal) agree with each other within 4 % and are much faster at short sequences: on GB300
1,300-1,350 / 1,500-1,530 / 1,600 TFLOP/s combined at 4K / 8K / 16K against 9.13's 953 /
1,215 / 1,368 (+36 / +24 / +17 %; saturated 0.705 of 2,450 with ``s_half`` ~670 keys), on
GB200 +56 / +35 / +27 % over B200's 9.13 points (head layouts differ: 128 / 8 heads there).
Not applied: which cuDNN each validation run's container held is not published (Megatron-
Bridge images build on NGC PyTorch 25.09-26.06 and may reinstall cuDNN), and with these rates
(and the GB300 FP8 GEMM refitted to about 0.68) the never-fitted GB300 MoE runs move from a
7.2 to a 10.4 % median, all too fast (validation/analysis.md, "cuDNN release").
NeMo 25.04 (validation/stacks/ B200 long-sequence table, dgxc GB200 tables) builds on
``nvcr.io/nvidia/pytorch:25.01-py3`` (NVIDIA/NeMo branch r2.3.0,
``requirements/manifest.json``), whose cuDNN (9.7) has no published B200 SDPA benchmark:
it is assumed to run at the 9.10 rate. Stacks built on cuDNN 9.17 or later probably run
faster than the constants.

Sliding windows (:func:`window_fill`): a layer whose rows see ``k_w`` keys on average (a
band of ``w`` keys, :func:`simulator.workload.ops.window_keys`) runs its fused kernel at
``E * k_w / (k_w + 660) * head_factor(d)``, the architecture's saturated ``E`` as above. The
half-point is the windowed kernel's own, from cuDNN's benchmark of GPT-OSS's attention (head
dim 64, bf16, batch 2, forward + 2.5x backward): H200 cuDNN 9.19.0, 64 / 8 heads, window
1,024 (``h200_919_only_cudnn/gpt_oss_20260227_034819.csv``, commit df73764,
:data:`CUDNN_WINDOW_H200`) fits 666 keys; GB200 and GB300 cuDNN 9.22.0, 128 / 128 heads,
window 128 (``gpt_oss/gb{200,300}``, the bf16 columns of
:data:`simulator.compute.fp8_attention.CUDNN_922`) fit 597 and 720, so one value, 660, is
kept for both architectures (within 10 % of every point from 4K to 16K; tests/
test_attention_window.py). The causal curve's tile fill does not carry over: Blackwell's
1,150-key causal ``s_half`` put a 128-key window at 0.56x its measured rate, Hopper's 512 a
1,024-key window 11 % above it. The window's edge tiles are masked as a causal diagonal's.

Grouped-query attention shares K/V tiles across query heads inside the kernel
and does not change its rate (FA2/FA3 kernels take GQA natively); the caller counts FLOPs
by query heads.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..hardware import GPU

FAMILIES = ("te", "cudnn", "fa2", "fa3", "triton")
# Saturated efficiency (fraction of dense bf16 peak) by family and architecture; sources
# in the module docstring. A family without a figure for an architecture falls back to te.
MEASURED = {
    ("fa2", "hopper"): 0.35,
    ("fa2", "ampere"): 0.575,
    ("fa3", "hopper"): 0.55,
    ("fa2", "blackwell"): 0.17,
}
# FlashAttention in Triton against FlashAttention-2 on A100 (forward, backward rate ratios;
# Dao 2023 Sec. 4.1: FA2 1.3-1.5x faster forward, taken at 1.4, and 2x faster backward)
TRITON_VS_FA2_A100 = (1.0 / 1.4, 1.0 / 2.0)
S_HALF_CAUSAL = 512.0  # keys per query row at which a causal kernel runs at half rate
S_HALF_FULL = 160.0  # same, no mask
# Mean keys per row at which a sliding-window kernel runs at half rate (module docstring).
WINDOW_S_HALF = 660.0
D_HALF = 32.0  # head dim at which the per-row rate halves
TE_REF_S_EFF = 1024.0  # the fit set's shortest sequence (2048, causal): s_eff = 1024
# Architectures whose te / cudnn ``attention_efficiency`` is a kernel benchmark's saturated
# rate (the docstring's sources), not a constant fitted on training steps.
KERNEL_SOURCED = ("hopper", "blackwell")
# Blackwell: keys per query row at half rate, causal / no mask (fitted on the cuDNN
# benchmark in the module docstring; the non-causal one scaled from Hopper's 160 / 512).
BLACKWELL = {"s_half_causal": 1150.0, "s_half_full": 1150.0 * S_HALF_FULL / S_HALF_CAUSAL}
# FlashAttention-2 (PyTorch SDPA's flash backend) on H200 in the same repository's 2024
# benchmark (benchmark/benchmark_results.csv, commit de355c7): causal (seq, forward, backward
# TFLOP/s), 16 heads, head dim 128: 5 % below MEASURED[("fa2", "hopper")] (module docstring).
FA2_H200 = ((4096, 296.52, 245.18), (8192, 321.94, 275.40), (16384, 327.17, 305.19),
            (32768, 345.64, 316.92), (65536, 338.85, 323.98))
# The cuDNN benchmark points on H200 (seq, forward, backward TFLOP/s, peak 989) that
# dgx-h100 / h200 ``attention_efficiency`` is derived from: cudnn-frontend
# benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/llama3.1_20260227_034703.csv
# (commit df73764), cuDNN 9.19.0, causal (top_left), 64 / 8 heads, head dim 128, batch 1.
CUDNN_H200 = {
    "9.19.0": ((4096, 591.0, 474.0), (8192, 644.0, 541.0), (16384, 673.0, 579.0),
               (32768, 688.0, 581.0)),
}
# The same file's unmasked (no_mask) points, the check of the non-causal tile fill.
CUDNN_H200_NO_MASK = {
    "9.19.0": ((4096, 671.0, 560.0), (8192, 691.0, 594.0), (16384, 702.0, 612.0),
               (32768, 693.0, 572.0)),
}
# The cuDNN benchmark points (seq, forward, backward TFLOP/s on B200, peak 2,250) the
# Blackwell constants were derived from: cudnn-frontend benchmark/sdpa_benchmark_training
# artifacts, cuDNN 9.10.2 (commit 9793df5) and 9.13.0 (commit bb37575); see the docstring.
CUDNN_B200 = {
    "9.10.2": ((4096, 874.1, 694.7), (8192, 1197.4, 940.0), (16384, 1349.8, 1072.8),
               (32768, 1429.6, 1124.4), (65536, 1448.0, 1058.2), (131072, 1330.2, 1023.5)),
    "9.13.0": ((4096, 855.7, 701.3), (8192, 1171.3, 942.5), (16384, 1332.4, 1074.8),
               (32768, 1419.0, 1108.7), (65536, 1382.3, 1073.1), (131072, 1355.4, 1047.8)),
}
# The sliding-window points (seq, bf16 forward ms, bf16 backward ms) on H200 that
# WINDOW_S_HALF was read from with the Blackwell ones (module docstring): cudnn-frontend
# benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/gpt_oss_20260227_034819.csv
# (commit df73764), cuDNN 9.19.0, batch 2, 64 query / 8 KV heads, head dim 64, window 1024.
CUDNN_WINDOW_H200 = {"window": 1024, "batch": 2, "heads": 64, "head_dim": 64,
                     "points": ((2048, 0.166, 0.488), (4096, 0.358, 1.042),
                                (8192, 0.738, 2.149), (16384, 1.499, 4.392))}
# The same benchmark on GB300 (Blackwell Ultra; peak 2,450 in topologies/gb300-nvl72.yaml),
# cuDNN 9.13.0, commit 0b1577c: the source of gb300-nvl72's attention_efficiency.
CUDNN_GB300 = {
    "9.13.0": ((4096, 1144.9, 892.6), (8192, 1495.7, 1130.1), (16384, 1702.5, 1267.8),
               (32768, 1795.9, 1319.2), (65536, 1770.5, 1301.7), (131072, 1720.9, 1280.0)),
}


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


def tile_fill(s_eff: float, causal: bool, architecture: str = "hopper") -> float:
    """``s_eff / (s_eff + s_half)``: the per-row amortisation of a flash kernel (0..1);
    ``s_half`` is Blackwell's on ``architecture == "blackwell"``, Hopper's otherwise."""
    if architecture == "blackwell":
        half = BLACKWELL["s_half_causal" if causal else "s_half_full"]
    else:
        half = S_HALF_CAUSAL if causal else S_HALF_FULL
    return s_eff / (s_eff + half) if s_eff > 0 else 0.0


def fwd_bwd_rate(fwd: float, bwd: float) -> float:
    """Forward + backward rate of one kernel pair, weighted by FLOPs (backward 2.5x the
    forward, Dao 2023): ``3.5 / (1/fwd + 2.5/bwd)``, in the units of its inputs."""
    return 3.5 / (1.0 / fwd + 2.5 / bwd)


MEASURED[("triton", "ampere")] = (MEASURED[("fa2", "ampere")]
                                  * fwd_bwd_rate(*TRITON_VS_FA2_A100))


def head_factor(d: float) -> float:
    """Rate at head dim ``d`` relative to 128: ``(d/(d+32)) / (128/160)``."""
    return (d / (d + D_HALF)) / (128.0 / (128.0 + D_HALF)) if d > 0 else 1.0


def window_fill(keys: float) -> float:
    """``keys / (keys + WINDOW_S_HALF)``: the per-row amortisation of a sliding-window
    kernel whose rows see ``keys`` keys on average (0..1; module docstring)."""
    return keys / (keys + WINDOW_S_HALF) if keys > 0 else 0.0


def kernel_efficiency(family: str, gpu: GPU, s_k: float, d: float, causal: bool,
                      window: bool = False) -> float:
    """Achieved fraction of the bf16 peak of a fused attention kernel (dimensionless).

    ``s_k``: keys each query row attends to before masking; ``d``: head dim; ``causal``:
    the block is on the diagonal (half its square masked). ``window``: a sliding-window
    kernel, ``s_k`` the mean keys a row sees (:func:`window_fill`). See the module
    docstring.
    """
    a = arch(gpu)
    if family == "triton" and a != "ampere":
        raise ConfigError("training.attention_family", family,
                          f"is FlashAttention in Triton, measured on A100 only (Dao 2023); "
                          f"on {gpu.name} use fa2, fa3 or cudnn")
    fill = window_fill(s_k) if window else tile_fill(s_k * (0.5 if causal else 1.0), causal, a)
    measured = MEASURED.get((family, a))
    if measured is None and a in KERNEL_SOURCED:  # te / cudnn: the topology's kernel figure
        measured = gpu.attention_efficiency
    if measured is None:  # te / cudnn, or a family with no figure for this GPU
        ref = tile_fill(TE_REF_S_EFF, True)
        return (gpu.attention_efficiency * min(1.0, fill / ref)
                * min(1.0, head_factor(d)))
    return measured * fill * head_factor(d)
