"""LoRA fine-tuning: frozen base weights with a trainable low-rank adapter per target linear.

Hu et al. 2021 ("LoRA", arXiv:2106.09685, Sec. 4.1): a linear ``Y = X W`` (``W`` of
``in x out``, frozen) gets ``Y += s * dropout(X) A B`` with ``A`` of ``in x r`` and ``B`` of
``r x out`` (``r`` = ``training.lora_dim``), which train. As Megatron-Bridge's ``LoRA``
(``peft/lora.py``, ``ParallelLinearAdapter``) and NeMo AutoModel's ``LinearLoRA`` run it:

* **targets** (``training.lora_target_modules``, Megatron-Core names): ``linear_qkv`` and
  ``linear_fc1`` (column-parallel: ``A`` whole on every TP rank, ``B`` split by output),
  ``linear_proj`` and ``linear_fc2`` (row-parallel: ``A`` split by input, ``B`` whole). Per
  GPU an adapter holds ``r * (in + out/t)`` or ``r * (in/t + out)`` parameters. The adapter's
  partial sums ride the base layer's own TP reduction (AutoModel ``LinearLoRA.forward``
  scales before ``B`` "so only one reduce-scatter is needed after addition"). This is
  AutoModel's split, not Megatron-Bridge's: its ``ParallelLinearAdapter``
  (``peft/utils.py`` @63b08b39) splits ``A`` by rank and gathers its ``T x r`` output on a
  column-parallel target, and on a row-parallel target all-reduces ``A``'s ``T x r`` output
  and all-gathers ``B``'s whole ``T x out`` output (``gather_output=True``), then splits it
  back to the sequence-parallel shard. Those TP collectives are not costed. Two are of size:
  the row-parallel targets' ``T x out`` all-gather (``linear_proj``, ``linear_fc2`` under
  TP > 1), and under sequence parallelism with userbuffer overlap of the QKV / FC1 fprop
  (``get_adapter_attributes_from_linear``: no ``return_layernorm_output_gathered`` then) the
  column-parallel targets' own all-gather of their ``T x in`` input (reduce-scatter in the
  backward). The 26.06 H100 LoRA run (TP 2, SP, ``tp_comm_overlap`` with the default
  userbuffer config, ``linear_qkv``) has the second: about 2-3 % of its step by the sizes.
* **compute** per adapter and micro-batch: the two GEMMs ``(T, r, in)`` and ``(T, out, r)``
  in 16-bit, the dropout where ``lora_dropout > 0`` (on the adapter's input, ``pre``,
  Megatron-Bridge's default; or on its output, ``post``, AutoModel's: read and write the
  16-bit tensor and a 1-byte mask; its backward the same bytes), and the add of the
  adapter's output into the base output (read two, write one). Backward: the adapters'
  GEMMs run their data and weight gradients; the frozen base GEMMs, the output layer's
  included, run only the data gradient (half their usual backward; no weight gradient to
  defer under zero-bubble schedules), and the frozen embedding, whose backward is its weight
  gradient, runs none (:mod:`.chunk_cost`). The add's backward passes the gradient through (no
  kernel).
* **memory**: the frozen weights are held in 16 bits with no gradient or optimizer state;
  the adapters carry the run's gradient and optimizer bytes. Activations add, per adapter
  and token, ``A``'s 16-bit output (``2 r`` bytes) and with dropout its mask (1 byte per
  element it drops) and, ``pre``, the dropped copy of the input ``A`` reads (2 bytes an
  element). A frozen base linear keeps no copy of its input (Transformer Engine saves it
  only for the weight gradient: ``backward_needs_input = is_grad_enabled and
  weight.requires_grad``, ``module/linear.py``); a target's adapter keeps the 16-bit input
  ``A`` reads (the dropped copy under ``pre`` dropout), so a linear without an adapter keeps
  nothing, and under FP8 a target keeps 2 bytes an element where full training keeps 1
  (``simulator/memory/activations.py`` ``_saved_input_bytes``).
* **data parallelism**: only the adapters' gradients are reduced and only their optimizer
  step runs; FSDP still gathers the frozen weights for every forward and backward.
* **MoE models**: adapters on the attention linears only (``linear_qkv``, ``linear_proj``;
  Megatron-Bridge's expert adapters, shared over an EP rank's experts, are not costed and
  are refused). The routed experts, router, shared experts and dense MLPs freeze: the
  experts' grouped GEMMs run the data gradient only (:mod:`.moe.layer`, ``frozen``), keep
  no inputs, hold no gradients or optimizer states, send nothing over expert-DP and leave
  a zero-bubble schedule no weight gradient to defer. Their host launches stay the full
  backward's (the fitted host model counts kernels per pass, not per GEMM kind).

Units: elements and FLOPs per GPU for one micro-batch; bytes where named.
"""

from __future__ import annotations

from dataclasses import replace

from ..config.workload import Workload
from ..shape.lora import TARGETS, dropout_position, enabled, local_io

ADAPTER = "_lora"  # name suffix of an adapter's ops


def _dropout(op: str, elements: float, element_bytes: float):
    """An adapter's dropout over ``elements``: the forward reads the 16-bit tensor and writes
    it and a 1-byte mask; the backward is one kernel of the same bytes, reading the output
    gradient and the mask and writing the input gradient (PyTorch ``native_dropout`` /
    ``native_dropout_backward``, aten/src/ATen/native/cuda/Dropout.cu ``masked_scale``), not
    twice the forward's as a norm's backward."""
    from .ops import mem  # ops imports this module
    nbytes = elements * (2 * element_bytes + 1)
    return mem(op + "_dropout", nbytes, bwd_nbytes=nbytes)


def adapter_ops(w: Workload, name: str, tokens: float, element_bytes: float) -> list:
    """The forward ops of target ``name``'s adapter after its base GEMM, for ``tokens``
    tokens through the GEMM (module docstring)."""
    from .ops import gemm, mem  # ops imports this module
    tr = w.training
    r = tr.lora_dim
    i, o = local_io(w)[name]
    op = TARGETS[name][0] + ADAPTER
    ops = []
    position = dropout_position(w)
    if tr.lora_dropout > 0 and position == "pre":
        ops.append(_dropout(op, tokens * i, element_bytes))
    ops += [gemm(op + "_a", tokens, r, i, dtype="bf16"),
            gemm(op + "_b", tokens, o, r, dtype="bf16")]
    if tr.lora_dropout > 0 and position == "post":
        ops.append(_dropout(op, tokens * o, element_bytes))
    # the add's backward passes the output gradient to both branches (no kernel); the two
    # input gradients (base and adapter) are summed instead, on the input's width
    ops.append(mem(op + "_add", 3 * tokens * o * element_bytes,
                   bwd_nbytes=3 * tokens * i * element_bytes))
    return ops


def with_adapters(w: Workload, ops: list) -> list:
    """``ops`` with every GEMM frozen and each target GEMM followed by its adapter; ``ops``
    unchanged without LoRA."""
    if not enabled(w):
        return ops
    by_op = {TARGETS[n][0]: n for n in w.training.lora_target_modules}
    out = []
    for o in ops:
        if o.kind != "gemm":
            out.append(o)
            continue
        out.append(replace(o, frozen=True))
        name = by_op.get(o.name)
        if name is not None:
            out += adapter_ops(w, name, o.shape[0], 2.0)
    return out
