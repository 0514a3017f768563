"""Bytes per parameter of the model states: weights, FP8 copies, gradients, optimizer.

Mixed-precision Adam keeps, per parameter (Rajbhandari et al. 2020, "ZeRO", Section 3.1;
Megatron-LM ``docs/user-guide/features/dist_optimizer.md``: 18 bytes without the
distributed optimizer, ``6 + 12/d`` with it):

* **weights**, 2 bytes (bf16/fp16). With ``fp8_param_gather`` (NeMo: ``fp8_params``) the
  weights *are* FP8 tensors, 1 byte, and no 16-bit copy exists. Only Transformer Engine's
  linears are scaled: the embedding and output tables (Megatron-Core modules) stay 16-bit
  and keep no copies below (``memory/model.py`` ``_unscaled_tables``).
* **NVFP4 copies** (precision fp4): Transformer Engine's NVFP4 weights are block-scaled
  along each GEMM's reduction dimension, so the forward's row-wise copy and the backward's
  column-wise copy are both kept (0.5625 byte each: 4-bit values and an E4M3 scale per 16),
  the same on every GPU; with ``fp4_param_gather`` the weight is the row-wise copy and
  only the column-wise one is cached (:mod:`simulator.precision`).
* **FP8 copies** (precision fp8). Megatron-Core passes ``is_first_microbatch`` to
  Transformer Engine's linear layers unless ``disable_parameter_transpose_cache``
  (``megatron/core/extensions/transformer_engine.py``, TELinear.forward; TransformerConfig
  ``disable_parameter_transpose_cache``: "the parameter transposes are not cached for
  subsequent iterations"), so TE keeps each weight's FP8 form across micro-batches: with
  16-bit weights a cached FP8 copy (1 byte) and its transpose (1 byte: Hopper FP8 GEMMs
  take only the TN layout, so the backward needs ``W^T`` in FP8); with FP8 weights only
  the transpose (1 byte). Megatron-LM commit d98e8a64. On a GPU whose FP8 GEMMs take
  every layout (``gpu.fp8_any_layout``: compute capability 10 and up, Blackwell) a
  per-tensor-scaled weight (recipes ``delayed``, ``tensorwise``) needs no transpose:
  Transformer Engine makes the column-wise copy only where ``non_tn_fp8_gemm_supported()``
  is false (``transformer_engine/pytorch/csrc/extensions/util.cpp``: ``major >= 10``;
  ``tensor/storage/float8_tensor_storage.py`` ``update_usage`` never makes one there), so
  the cache is the FP8 copy alone (1 byte) with 16-bit weights and nothing with FP8
  weights. Block-scaled recipes (``mxfp8``, ``blockwise``) scale the two directions
  separately and keep both copies on every GPU. Under Transformer Engine 1.x (stack
  ``fp8.weight_transpose_in_backward``, the NeMo 24 releases) per-tensor FP8 weights under
  ``disable_parameter_transpose_cache`` keep no copy at all: TE makes an FP8 primary
  weight's transpose in the backward and caches it only when it is given
  ``is_first_microbatch`` (TE v1.6rc2 / v1.7 ``module/linear.py`` ``_Linear.backward``:
  ``weight.transpose_2d(cache=ctx.is_first_microbatch is not None)``), which Megatron-Core
  withholds under that flag, so each layer's transpose lives only through its own backward.
  TE 2 keeps it on the weight once made (``float8_tensor_storage.py`` ``update_usage``: the
  backward's ``columnwise_usage=True`` creates ``_transpose``, which later calls keep).
  16-bit weights under the flag still hold their FP8 copy and transpose from each forward to
  its backward (TE's uncached workspaces), so their peak keeps both; block-scaled FP8
  weights keep their column-wise copy (no source shows when TE 2's backward frees it).
* **gradients**: Megatron's ``main_grad`` buffer, full size on every rank (the distributed
  optimizer is ZeRO-1): 4 bytes when gradients are accumulated and reduced in fp32 (the
  bf16 default, ``accumulate_allreduce_grads_in_fp32``), 2 when they are reduced in bf16
  (NeMo recipes: ``grad_sync_dtype: bf16``; Megatron ``--grad-reduce-in-bf16`` or
  ``--main-grads-dtype bf16``). The fp32 copy the distributed optimizer makes of its own
  gradient shard lives only during the optimizer step, after the activations are freed,
  so it does not raise the peak and is left out.
* **optimizer**: main (master) parameters and Adam's two moments, 4 + 4 + 4 bytes, or the
  precision-aware optimizer's ``main_params_dtype``, ``exp_avg_dtype``,
  ``exp_avg_sq_dtype`` (Megatron-Core ``--use-precision-aware-optimizer``; fp8 moments 1
  byte). ``training.optimizer`` (Megatron-Core ``--optimizer``) sets the moments: Lion and
  SGD with momentum keep one (:func:`optimizer_states`). Sharded over the data x context
  ranks by the distributed optimizer (expert parameters over the expert-data-parallel
  ranks).

PyTorch FSDP (stack profiles ``fsdp.implementation: fsdp1 | fsdp2``) with sharded weights
keeps no 16-bit weight apart from the optimizer's main copy: the sharded parameter is the
module's parameter, in the dtype the model was built in, and the optimizer steps it.
FSDP2 casts to ``MixedPrecisionPolicy.param_dtype`` only the all-gather input
(``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``, ``ShardedState.SHARDED``: the
sharded parameter "is the only contributor to parameter memory"). FSDP1 frees its
low-precision shard ``_mp_shard`` after each all-gather (``_flat_param.py``,
``FlatParamHandle.post_unshard``). The sharded gradient takes the parameter's dtype too,
whatever the reduce dtype: FSDP1 ``_runtime_utils._cast_grad_to_param_dtype``; FSDP2
``_fsdp_collectives.foreach_reduce``, ``_to_dtype_if_needed(reduce_output, orig_dtype)``.
So a trained parameter holds the main copy, a gradient of its dtype and the moments:
16 bytes when the model is built in fp32 (torchtitan, fms-fsdp, Composer), 8 when it is
loaded in bf16 with bf16 moments (NeMo AutoModel). Megatron-FSDP and DeepSpeed ZeRO-3 keep
a 16-bit shard beside the fp32 one. Frozen weights (LoRA's base) keep their 16-bit shard
(:func:`torch_fsdp_holds_main_only`).
"""

from __future__ import annotations

from ..config.workload import TrainingConfig
from ..precision import DTYPE_BYTES

WEIGHT_BYTES = 2.0  # bf16 / fp16 weights
FP8_BYTES = 1.0  # one FP8 copy (weight or transpose)


def weight_bytes(tr: TrainingConfig) -> float:
    """Bytes per parameter of the weights the model holds (1 with FP8 weights, 0.5625 with
    NVFP4 ones)."""
    return tr.precision_type.element_bytes if tr.scaled_params else WEIGHT_BYTES


# recipes with one scale per tensor: their FP8 data serves both GEMM directions where the
# tensor cores take every layout (module docstring)
PER_TENSOR_RECIPES = ("delayed", "tensorwise")


def fp8_copy_bytes(tr: TrainingConfig, any_layout: bool = False,
                   transpose_in_backward: bool = False) -> float:
    """Bytes per parameter of TE's cached FP8 forms: copy + transpose with 16-bit weights,
    transpose only with FP8 weights, none outside FP8 training. ``any_layout``: the GPU's
    FP8 GEMMs take non-TN layouts (``gpu.fp8_any_layout``), so a per-tensor recipe keeps
    no transpose. ``transpose_in_backward``: the stack's library makes an FP8 weight's
    transpose in each backward and caches it only with ``is_first_microbatch`` (stack
    ``fp8.weight_transpose_in_backward``, Transformer Engine 1.x), so per-tensor FP8 weights
    under ``disable_parameter_transpose_cache`` keep none (module docstring)."""
    prec = tr.precision_type
    if not prec.scaled:
        return 0.0
    if prec.block_scaled:  # row- and column-wise copies, whatever the GPU (NVFP4)
        return (1 if tr.scaled_params else 2) * prec.element_bytes
    if (transpose_in_backward and tr.fp8_param_gather and tr.disable_parameter_transpose_cache
            and tr.fp8_recipe in PER_TENSOR_RECIPES):
        return 0.0  # made in each layer's backward and not cached (module docstring)
    transposes = 0 if any_layout and tr.fp8_recipe in PER_TENSOR_RECIPES else 1
    return (transposes if tr.fp8_param_gather else 1 + transposes) * FP8_BYTES


def grad_bytes(tr: TrainingConfig) -> float:
    """Bytes per parameter of the main-grad buffer: 4 (fp32) or 2 (bf16)."""
    return 4.0 if tr.grads_in_fp32 else 2.0


def optimizer_states(tr: TrainingConfig) -> tuple[str, ...]:
    """The dtypes of the per-parameter states the optimizer keeps beside the main copy:
    Adam's ``exp_avg`` and ``exp_avg_sq`` (Kingma and Ba 2015, Algorithm 1); Lion's one
    momentum ``exp_avg`` (Chen et al. 2023, "Symbolic Discovery of Optimization
    Algorithms", Program 1: it tracks only the momentum); SGD's momentum buffer unless
    ``sgd_momentum`` is 0 (``torch.optim.SGD``: no buffer without momentum)."""
    if tr.optimizer == "adam":
        return (tr.exp_avg_dtype, tr.exp_avg_sq_dtype)
    if tr.optimizer == "lion" or tr.sgd_momentum > 0:
        return (tr.exp_avg_dtype,)
    return ()


def optimizer_bytes(tr: TrainingConfig) -> float:
    """Bytes per parameter of the optimizer state before sharding: main params + the
    optimizer's states (12 for fp32 Adam, 8 for fp32 Lion or SGD with momentum)."""
    return DTYPE_BYTES[tr.main_params_dtype] + sum(DTYPE_BYTES[d] for d in optimizer_states(tr))


def torch_fsdp_holds_main_only(tr: TrainingConfig, fsdp_impl: str) -> bool:
    """Whether trained parameters hold only the main copy (no separate 16-bit weight) and a
    gradient of its dtype: PyTorch FSDP1 / FSDP2 with sharded weights (module docstring)."""
    return tr.params_sharded and fsdp_impl in ("fsdp1", "fsdp2")
