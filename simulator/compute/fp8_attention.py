"""FP8 attention (Megatron-Core ``--fp8-dot-product-attention``): the fused kernel's speed
relative to the BF16 one at the same shape, forward and backward apart. Dimensionless.

Transformer Engine's DotProductAttention with ``fp8_dpa`` quantises Q, K, V (and in the
backward dO) to FP8 and calls cuDNN's FP8 SDPA: per-tensor scaled FP8 under the delayed /
current-scaling recipes and MXFP8 under MXFP8BlockScaling
(``transformer_engine/pytorch/attention/dot_product_attention/backends.py``, NVIDIA/
TransformerEngine d0067d0d: ``'delayed'`` / ``'current'`` / ``'mxfp8'`` by the quantizer).
Its speed is not the GEMMs' FP8 gain: the kernel's softmax and tile loads do not speed up,
and the FP8 backward does not skip masked tiles.

Source: NVIDIA cudnn-frontend ``benchmark/sdpa_benchmark_training/results`` (commit
3929da2), cuDNN 9.22.0, bf16 / fp8 / mxfp8 forward and backward times (ms) of the same
shapes, non-deterministic backward, batch 2:

* ``llama3.1``: 64 query / 8 KV heads, head dim 128 (files ``llama3.1/gb200/..._100750.csv``,
  ``llama3.1/gb300/..._100757.csv``);
* ``dsv3``: 128 / 128 heads, head dim 192 for Q-K and 128 for V, DeepSeek-V3's MLA
  (``dsv3/gb200/..._101009.csv``, ``dsv3/gb300/..._101002.csv``);
* ``gpt_oss``: 128 / 128 heads, head dim 64, causal sliding window of 128 keys
  (``gpt_oss/gb200/..._100011.csv``, ``gpt_oss/gb300/..._100022.csv``);
* Hopper: H200, cuDNN 9.19.0, batch 1, the llama3.1 heads, bf16 and fp8 only (MXFP8 is a
  Blackwell format; ``h200_919_only_cudnn/llama3.1_20260227_034703.csv``).

What the tables say:

* causal (``top_left``) and unmasked, head dim 128: the FP8 forward runs in 0.63-0.79 of
  the BF16 time, the backward in 0.70-1.06 (GB200 / GB300, 2K-16K), MXFP8 slower than
  FP8 (backward 0.93-1.19: MXFP8 attention is no faster than BF16 at 2K-8K);
* head dim 192 (MLA): FP8 0.56-0.68 forward, 0.53-0.64 backward; MXFP8 0.62-0.75 /
  0.62-0.81;
* sliding window: the forward gains as a causal one does (0.82-1.01), but the FP8 and
  MXFP8 backward do not skip the tiles outside the band: 2.1-2.7x the BF16 window backward
  at 2K, 11-15x at 16K, growing with the sequence as an O(S^2) kernel against an O(S W) one.
  The backward of a windowed layer in FP8 is therefore costed as the FP8 *causal* backward
  over the whole sequence (:func:`simulator.workload.ops.attention_core`). On the benchmark's
  window shapes that reproduces the measured FP8 / MXFP8 window backward within 20 % at 4K-8K
  and within -23 / +43 % at 2K-16K on GB200 and GB300 (the BF16 causal curve's tile fill at
  head dim 64, which the mechanism borrows, is the larger part of the misfit;
  tests/test_fp8_attention.py);
* Hopper, causal: the FP8 backward is no faster at 4K (1.01x) and slower beyond (1.26x at
  8K, 1.55x at 16K): cuDNN 9.19's FP8 causal backward on Hopper also runs most of the masked
  square (its 16K causal time is 0.88 of the unmasked one, BF16 0.53).

Between measured lengths the ratio is interpolated in ``log2(s)``, and held at the ends
(2K, 16K). Head dim: the nearest measured one (64 takes 128's causal ratios: no head-dim-64
full-attention FP8 point is published). GB200 / B200 take the GB200 points (one die),
GB300 / B300 the GB300 points; other GPUs have no FP8 attention benchmark and are costed
as BF16 (speed 1). The quantisation of Q, K, V and dO (one read of 2 B and a write of 1 B
per element, a few per cent of the kernel) is not modelled; the smaller saved activations
are (:mod:`simulator.memory.activations`). Under context parallelism each ring block
(causal on the diagonal, unmasked off it) and each Ulysses kernel runs at its own FP8
speed, with the KV exchange in 16-bit (TE's FP8 ring may send FP8).
"""

from __future__ import annotations

import itertools
import math

from ..hardware import GPU
from .attention import arch

# (seq, bf16 fwd, bf16 bwd, fp8 fwd, fp8 bwd, mxfp8 fwd, mxfp8 bwd), ms, from the files in
# the module docstring; key: (GPU table, head dim or "window", mask)
CUDNN_922: dict[tuple[str, object, str], tuple[tuple[float, ...], ...]] = {
    ("gb200", 128, "causal"): (
        (2048, 0.125, 0.389, 0.097, 0.414, 0.103, 0.461),
        (4096, 0.391, 1.198, 0.305, 1.167, 0.326, 1.305),
        (8192, 1.397, 4.127, 1.074, 3.781, 1.156, 4.272),
        (16384, 5.150, 16.554, 4.084, 13.476, 4.400, 15.315)),
    ("gb200", 128, "full"): (
        (2048, 0.192, 0.611, 0.146, 0.566, 0.157, 0.643),
        (4096, 0.687, 2.037, 0.525, 1.743, 0.565, 2.046),
        (8192, 2.483, 7.831, 1.962, 6.206, 2.115, 7.352),
        (16384, 10.369, 32.014, 7.773, 23.960, 8.365, 28.309)),
    ("gb300", 128, "causal"): (
        (2048, 0.100, 0.356, 0.070, 0.364, 0.079, 0.424),
        (4096, 0.323, 1.101, 0.217, 0.985, 0.242, 1.203),
        (8192, 1.185, 3.832, 0.759, 3.087, 0.856, 3.917),
        (16384, 4.593, 14.593, 2.880, 10.805, 3.225, 14.072)),
    ("gb300", 128, "full"): (
        (2048, 0.152, 0.567, 0.101, 0.494, 0.113, 0.591),
        (4096, 0.579, 1.924, 0.368, 1.495, 0.408, 1.871),
        (8192, 2.181, 7.181, 1.392, 5.209, 1.532, 6.723),
        (16384, 8.734, 28.638, 5.529, 20.203, 6.089, 26.041)),
    ("gb200", 192, "causal"): (
        (2048, 0.321, 1.056, 0.207, 0.681, 0.224, 0.854),
        (4096, 0.977, 3.383, 0.656, 2.112, 0.714, 2.620),
        (8192, 3.470, 11.984, 2.294, 7.296, 2.478, 9.567),
        (16384, 13.103, 50.424, 8.845, 29.050, 9.337, 36.835)),
    ("gb200", 192, "full"): (
        (2048, 0.461, 1.706, 0.316, 0.989, 0.341, 1.188),
        (4096, 1.650, 6.085, 1.092, 3.450, 1.187, 4.267),
        (8192, 6.249, 25.403, 4.258, 13.472, 4.567, 17.014),
        (16384, 24.270, 105.115, 16.984, 57.481, 17.648, 69.820)),
    ("gb300", 192, "causal"): (
        (2048, 0.268, 0.977, 0.150, 0.591, 0.166, 0.772),
        (4096, 0.864, 3.127, 0.493, 1.803, 0.546, 2.348),
        (8192, 3.013, 11.074, 1.758, 6.188, 1.944, 8.030),
        (16384, 11.178, 43.911, 6.653, 23.257, 7.336, 31.002)),
    ("gb300", 192, "full"): (
        (2048, 0.388, 1.600, 0.225, 0.851, 0.249, 1.073),
        (4096, 1.419, 5.641, 0.832, 2.971, 0.912, 3.720),
        (8192, 5.439, 21.973, 3.233, 11.395, 3.538, 14.104),
        (16384, 21.640, 91.189, 12.794, 44.344, 14.110, 56.977)),
    # head dim 64, causal sliding window of 128 keys (gpt_oss)
    ("gb200", "window", "causal"): (
        (2048, 0.109, 0.237, 0.101, 0.536, 0.109, 0.642),
        (4096, 0.210, 0.465, 0.195, 1.731, 0.210, 2.080),
        (8192, 0.414, 0.911, 0.385, 6.176, 0.417, 7.427),
        (16384, 0.822, 1.818, 0.766, 23.231, 0.826, 27.940)),
    ("gb300", "window", "causal"): (
        (2048, 0.104, 0.227, 0.086, 0.467, 0.092, 0.581),
        (4096, 0.202, 0.442, 0.167, 1.480, 0.175, 1.871),
        (8192, 0.397, 0.862, 0.327, 5.189, 0.342, 6.648),
        (16384, 0.790, 1.712, 0.650, 19.354, 0.676, 24.996)),
}
# H200, cuDNN 9.19.0 (no MXFP8): (seq, bf16 fwd, bf16 bwd, fp8 fwd, fp8 bwd), ms
CUDNN_H200_919: dict[tuple[str, object, str], tuple[tuple[float, ...], ...]] = {
    ("h200", 128, "causal"): (
        (2048, 0.142, 0.464, 0.098, 0.437), (4096, 0.465, 1.450, 0.322, 1.459),
        (8192, 1.708, 5.083, 1.141, 6.392), (16384, 6.531, 19.002, 4.357, 29.422)),
    ("h200", 128, "full"): (
        (2048, 0.217, 0.681, 0.158, 0.647), (4096, 0.819, 2.453, 0.565, 2.285),
        (8192, 3.182, 9.262, 2.149, 8.637), (16384, 12.524, 35.947, 8.335, 33.355)),
}
HEAD_DIMS = (128, 192)


def table_of(gpu: GPU) -> str | None:
    """The benchmark a GPU takes its FP8 attention ratios from: ``gb200`` (B200 / GB200),
    ``gb300`` (B300 / GB300), ``h200`` (Hopper); None: no FP8 benchmark."""
    a = arch(gpu)
    if a == "hopper":
        return "h200"
    if a == "blackwell":
        return "gb300" if gpu.name.upper().startswith(("GB300", "B300")) else "gb200"
    return None


def _points(table: str, key: object, mask: str) -> tuple[tuple[float, ...], ...]:
    source = CUDNN_H200_919 if table == "h200" else CUDNN_922
    return source[(table, key, mask)]


def _ratio(points: tuple[tuple[float, ...], ...], s: float, recipe: str) -> tuple[float, float]:
    """(fwd, bwd) time ratio FP8 / BF16 at ``s``: log2-linear between points, held at the
    ends. ``recipe``: "fp8" or "mxfp8" (columns of the tables)."""
    col = 5 if recipe == "mxfp8" and len(points[0]) > 5 else 3
    ratios = [(math.log2(p[0]), p[col] / p[1], p[col + 1] / p[2]) for p in points]
    x = math.log2(max(s, 1.0))
    if x <= ratios[0][0]:
        return ratios[0][1], ratios[0][2]
    for (x0, f0, b0), (x1, f1, b1) in itertools.pairwise(ratios):
        if x <= x1:
            u = (x - x0) / (x1 - x0)
            return f0 + u * (f1 - f0), b0 + u * (b1 - b0)
    return ratios[-1][1], ratios[-1][2]


def recipe_of(training) -> str:
    """The benchmark column a run's attention uses: ``""`` (a BF16 kernel) unless
    ``training.fp8_dot_product_attention``, else :func:`benchmark_recipe` of its recipe."""
    if not training.fp8_dot_product_attention:
        return ""
    return benchmark_recipe(training.fp8_recipe)


def benchmark_recipe(fp8_recipe: str) -> str:
    """The benchmark column of a Megatron-Core ``--fp8-recipe``: MXFP8 attention under
    ``mxfp8``, per-tensor scaled FP8 otherwise (delayed, tensorwise, blockwise)."""
    return "mxfp8" if fp8_recipe == "mxfp8" else "fp8"


def speed(fp8_recipe: str, gpu: GPU, seq: float, head_dim: float, causal: bool
          ) -> tuple[float, float]:
    """(forward, backward) speed of the FP8 attention kernel over the BF16 one (BF16 time /
    FP8 time) at sequence ``seq`` (keys per query row before masking), head dim
    ``head_dim``; (1, 1) on a GPU without a benchmark."""
    table = table_of(gpu)
    if table is None:
        return 1.0, 1.0
    d = min(HEAD_DIMS, key=lambda h: abs(h - head_dim)) if table != "h200" else 128
    f, b = _ratio(_points(table, d, "causal" if causal else "full"), seq,
                  benchmark_recipe(fp8_recipe))
    return 1.0 / f, 1.0 / b


def window_forward_speed(fp8_recipe: str, gpu: GPU, seq: float) -> float:
    """Speed of an FP8 sliding-window forward over the BF16 one (the gpt_oss points);
    Hopper has none (cuDNN 9.19 rejects FP8 with a window: the H200 gpt_oss rows failed),
    and takes the causal forward's."""
    table = table_of(gpu)
    if table is None:
        return 1.0
    if table == "h200":
        return speed(fp8_recipe, gpu, seq, 128, True)[0]
    return 1.0 / _ratio(_points(table, "window", "causal"), seq, benchmark_recipe(fp8_recipe))[0]


def pass_speed(fp8_attn: tuple[str, str, float], gpu: GPU, head_dim: float, causal: bool
               ) -> float:
    """Speed over BF16 of one FP8 attention kernel, ``fp8_attn = (recipe, pass, seq)`` with
    pass ``fwd`` / ``bwd`` (causal or unmasked, per ``causal``) or ``window_fwd`` (a sliding
    window's forward; its backward is a causal ``bwd`` over the whole sequence)."""
    recipe, kind, seq = fp8_attn
    if kind == "window_fwd":
        return window_forward_speed(recipe, gpu, seq)
    return pass_rate(recipe, gpu, seq, head_dim, causal, kind == "bwd")


def pass_rate(recipe: str, gpu: GPU, seq: float, head_dim: float, causal: bool,
              backward: bool) -> float:
    """One pass's speed from :func:`speed`: the backward's if ``backward``, else the
    forward's."""
    return speed(recipe, gpu, seq, head_dim, causal)[1 if backward else 0]
