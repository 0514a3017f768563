"""Kernel cost models: GEMMs, attention, memory-bound ops, optimizer step.

Each is a roofline with a measured efficiency from the topology's GPU block
(:class:`simulator.hardware.GPU`), plus a fixed per-kernel overhead. Inputs
are FLOPs, bytes and GEMM shapes; outputs are seconds.

Extension point: a new kernel family is one function ``(shape..., gpu, dtype)
-> seconds`` here; the workload layer decides which to call.
"""

from __future__ import annotations

from ..hardware import GPU
from ..precision import DTYPE_BYTES, precision_of

BYTES = DTYPE_BYTES  # bytes per element by dtype (simulator.precision)


def gemm_efficiency(m: float, n: float, k: float, gpu: GPU, dtype: str) -> float:
    """Achieved fraction of peak for an ``m x k @ k x n`` GEMM (dimensionless).

    ``eff_max * prod_d d / (d + d_half)`` over the three dimensions: small
    dimensions under-fill tensor-core tiles and SM waves (CUTLASS/cuBLAS
    tile-quantisation effect; NVIDIA "Matrix Multiplication Background"
    performance guide). ``eff_max`` is the large-GEMM efficiency measured on
    the GPU (topology ``gemm_efficiency``, with source).
    """
    eff_max = getattr(gpu, precision_of(dtype).efficiency)
    half = gpu.gemm_half_dim
    shape = 1.0
    for d in (m, n, k):
        shape *= d / (d + half) if half > 0 else 1.0
    return eff_max * shape


def gemm_time(m: float, n: float, k: float, gpu: GPU, dtype: str, batch: float = 1) -> float:
    """Seconds for ``batch`` GEMMs of ``2*m*n*k`` FLOPs each at the shape's efficiency.

    Timed at the precision's kernel peak (:mod:`simulator.precision`): FP8 GEMMs at the
    FP8 peak (Transformer Engine), 16-bit ones at the bf16 peak.
    """
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    peak = gpu.peak(precision_of(dtype).kernel)
    return flops / (peak * gemm_efficiency(m, n, k, gpu, dtype)) + gpu.kernel_overhead_s


def attention_time(flops: float, gpu: GPU, efficiency: float | None = None) -> float:
    """Seconds for fused (flash) attention doing ``flops`` FLOPs.

    ``efficiency``: the kernel's fraction of the bf16 peak for its family and shape
    (:func:`simulator.compute.attention.kernel_efficiency`); None: the topology's fitted
    ``gpu.attention_efficiency`` (Transformer Engine at the fit set's sequences).

    Runs in bf16 even in FP8 recipes (Transformer Engine default; with
    ``--fp8-dot-product-attention`` the caller scales ``efficiency`` by the FP8 kernel's
    speed, :mod:`simulator.compute.fp8_attention`), at the
    GPU's measured fused-attention efficiency (Dao 2023, FlashAttention-2;
    Shah et al. 2024, FlashAttention-3). Causal masking is accounted by the
    caller through the FLOPs it passes (about half of the full square).
    """
    if flops <= 0:
        return 0.0
    eff = gpu.attention_efficiency if efficiency is None else efficiency
    return flops / (gpu.peak("bf16") * eff) + gpu.kernel_overhead_s


def memory_time(nbytes: float, gpu: GPU) -> float:
    """Seconds for a bandwidth-bound kernel moving ``nbytes`` bytes of HBM traffic.

    Roofline memory bound: bytes / (HBM bandwidth x STREAM efficiency), as
    for layer norm, dropout, residual add, activation functions, softmax,
    rotary embedding and the optimizer step (Williams et al. 2009, Roofline).
    """
    if nbytes <= 0:
        return 0.0
    return nbytes / (gpu.hbm_bandwidth * gpu.memory_bandwidth_efficiency) \
        + gpu.kernel_overhead_s


def optimizer_time(params: float, gpu: GPU, states: int = 2) -> float:
    """Seconds for a fused optimizer step over ``params`` local parameters.

    Mixed-precision Adam reads fp32 master weight, two fp32 moments and the
    fp32 gradient, writes the three states and the bf16 weight: 16 B read +
    14 B written = 30 bytes per parameter (Rajbhandari et al. 2020 ZeRO,
    mixed-precision state layout; Apex/TE fused Adam is bandwidth bound). With
    ``states`` moments in general (Adam 2, Lion and SGD with momentum 1, plain SGD 0:
    :func:`simulator.memory.states.optimizer_states`): ``2 * (4 + 4 * states) + 4 + 2``
    bytes, every state read and written once. The states are taken in fp32 whatever
    the precision-aware dtypes (the step is a small share of a sharded step).
    """
    return memory_time((2.0 * (4.0 + 4.0 * states) + 6.0) * params, gpu)
