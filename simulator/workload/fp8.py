"""Transformer Engine FP8 quantisation traffic around every dense FP8 GEMM.

An FP8 GEMM runs at the FP8 tensor-core peak, but its operands must first be
*quantised*: Transformer Engine (TE) scales each bf16 tensor by its amax-derived
scale and writes FP8 bytes, in bandwidth-bound kernels on the compute stream
(NVIDIA TransformerEngine, ``transformer_engine/pytorch/module/linear.py`` and
``layernorm_linear.py``; kernels ``fp8_cast_transpose_fused``,
``fp8_cast_transpose_bgrad_fused``, ``fp8_transpose`` in
``transformer_engine/pytorch/cpp_extensions/transpose.py``). Hopper FP8 GEMMs
take only the "TN" layout, so every operand the backward consumes along its
other dimension also needs a transposed FP8 copy (TE's *columnwise* data of a
``Float8Tensor``). Per element, for a linear ``y = x W^T`` with ``x`` of
``T x k`` and ``W`` of ``n x k`` (bytes of HBM traffic):

* **input, plain TE linears** (attention output projection, FC2, MLA down projections
  and ``q_proj``; TE ``Linear``): one fused cast-transpose reads bf16 ``x`` (2 B) and writes the
  FP8 row-wise copy (1 B, forward GEMM) and the FP8 transpose (1 B, saved for
  the weight gradient): **4 B**. Under delayed scaling (the Megatron / NeMo
  default recipe) the amax is reduced inside the same kernel, so it moves no
  extra bytes;
* **input, layer-norm-fused linears** (QKV, FC1, and MLA's query / key-value up
  projections behind their latent norms; TE ``LayerNormLinear`` / ``LayerNormMLP`` in the
  Megatron-Core TE layer specs): the norm kernel writes FP8
  directly, so no bf16 re-read; only the transposed copy for the weight
  gradient is made: read 1 B + write 1 B = **2 B**;
* **output gradient** (backward, every linear): cast-transpose of the bf16
  gradient ``dy`` (``T x n``): read 2 B, write row-wise 1 B (data gradient) and
  columnwise 1 B (weight gradient): **4 B**;
* **weights**: cast and transposed (read 2 B, write 1 B + 1 B: 4 B per
  parameter) once per optimizer step: TE caches the FP8 weights across the
  micro-batches of a step (``is_first_microbatch``), so the cost is spread over
  the step's micro-batches. With ``fp8_param_gather`` the weights already live
  in FP8 and only the transpose is made (read 1 B + write 1 B: 2 B). Megatron-Core's
  ``disable_parameter_transpose_cache`` passes no ``is_first_microbatch``: the weights'
  bytes are paid every micro-batch.

The bytes per element are the precision's (:class:`simulator.precision.Casts`); each
cast is costed with :func:`simulator.compute.memory_time` (HBM bandwidth
x STREAM efficiency, plus one kernel overhead). The routed experts of a MoE
layer quantise their own inputs in :mod:`.moe.layer`; this module covers the
dense op lists only (attention linears, dense MLPs, MoE shared experts).
Per token a linear's casts scale with its widths ``k`` (input) and ``n`` (gradient) while
its FLOPs scale with ``n*k`` on each GPU, so the casts cost most where the *local* GEMMs are
narrow: high tensor parallelism and small models alike (validation/analysis.md, source 1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..precision import FP8_CASTS, Casts
from .opcopy import derive

if TYPE_CHECKING:  # the Op type only; ops.py imports this module
    from ..config.stacks import Stack
    from .ops import Op

# TE LayerNormLinear / LayerNormMLP consumers: the norm writes FP8 itself.
NORM_FUSED = frozenset({"qkv", "fc1", "q_up", "kv_up"})
# Every TE linear of a dense layer (Megatron-Core TE spec); the attention core's batched
# GEMMs and the vocabulary-parallel output layer are not TE FP8 linears.
LINEARS = NORM_FUSED | {"attn_proj", "fc2", "q_down", "q_proj", "kv_down"}

SUFFIX = "_fp8_cast"
# FP8's all-gather ratio, for the backward op lists (which know the ops, not the workload)
GATHER_BYTES_RATIO = FP8_CASTS.gather_ratio


def cast_op(op: Op, casts: Casts, microbatches: int, fp8_params: bool,
            stack: Stack | None = None) -> Op:
    """The quantisation kernels of one FP8 linear ``op`` (shape ``(T, n, k)``).

    Forward bytes: input (``T*k`` elements, see module docstring) plus the step's weight
    cast (``n*k`` parameters) spread over ``microbatches``; backward bytes
    (``bwd_nbytes``): the output gradient, ``T*n`` elements at 4 B. A stack profile with
    its own recipe (``stacks/*.yaml`` ``fp8``, e.g. torchao's dynamic tensorwise scaling:
    a separate amax pass and no norm fusion) replaces these per-element bytes, and may
    rebuild the FP8 weights every micro-batch (FSDP2 reshards them after each use). Where
    the recipe makes the column-major copies of the input and the weight only in the
    backward (torchao: the forward saves the row-major FP8 input and a view of the FP8
    weight; ``float8_ops.py`` ``preprocess_addmm`` copies them to the layout
    ``torch._scaled_mm`` needs when the backward's GEMMs run), those bytes
    (``fp8.backward_transpose_bytes`` of the profile) go to the backward op, so a layer's
    recompute, which re-runs only the forward, does not repeat them. A recipe whose
    backward GEMMs run unscaled and take the scales afterwards (torchao rowwise:
    ``fp8.backward_rescale_bytes``, an in-place multiply of each output, read + write) adds
    those bytes per element of the data gradient (``t*k``) and weight gradient (``n*k``).
    """
    t, n, k = op.shape
    per_in = casts.input_transpose if op.name in NORM_FUSED else casts.input
    per_w = casts.weight_transpose if fp8_params else casts.weight
    per_g = casts.grad
    spread = max(1, microbatches)
    late = 0.0  # bytes per input element / weight parameter made in the backward
    if stack is not None and stack.fp8_input_bytes is not None:
        per_in = (stack.fp8_norm_fused_input_bytes if op.name in NORM_FUSED
                  else stack.fp8_input_bytes) or per_in
        per_g = stack.fp8_grad_bytes or per_g
        per_w = stack.fp8_weight_bytes or per_w
        spread = 1 if stack.fp8_weight_per_microbatch else spread
        late = stack.fp8_backward_transpose_bytes
    fwd = (per_in - late) * t * k * op.batch + (per_w - late) * n * k / spread
    bwd = per_g * t * n * op.batch + late * (t * k * op.batch + n * k / spread)
    if stack is not None and stack.fp8_backward_rescale_bytes:
        # the data gradient (t x k) and weight gradient (n x k) rescaled after their GEMMs
        bwd += stack.fp8_backward_rescale_bytes * (t * k * op.batch + n * k)
    return derive(op, name=op.name + SUFFIX, kind="mem", flops=0.0, nbytes=fwd,
                  shape=(0.0, 0.0, 0.0), batch=1.0, model_flops=0.0, column=False,
                  bwd_nbytes=bwd)


def backward_cast(cast: Op) -> Op:
    """The backward quantisation of a cast op: its output-gradient bytes."""
    return derive(cast, name=cast.name + "_bwd", nbytes=cast.bwd_nbytes or 0.0)


def with_casts(ops: list[Op], casts: Casts, microbatches: int, fp8_params: bool,
               stack: Stack | None = None) -> list[Op]:
    """``ops`` with each TE linear preceded by its quantisation op (bytes per element from
    the precision's ``casts``) and each TP all-gather moving the scaled format
    (``casts.gather_ratio`` of its 16-bit bytes): TE quantises before every
    sequence-parallel all-gather that feeds a scaled linear (the norm writes FP8, the
    output gradient is cast before it is gathered, the saved FP8 input is what the
    backward re-gathers; userbuffers gather FP8); reduce-scatters stay 16-bit."""
    out: list[Op] = []
    for op in ops:
        if op.kind == "gemm" and op.name in LINEARS:
            out.append(cast_op(op, casts, microbatches, fp8_params, stack))
        if op.kind == "comm" and op.axis == "tp" and op.comm == "all_gather":
            op = derive(op, nbytes=op.nbytes * casts.gather_ratio)
        out.append(op)
    return out
