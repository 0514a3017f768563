"""One transformer layer (and the embedding / output layer) as a list of ops.

Sizes are per GPU for one micro-batch, after tensor (``t``), sequence and
context (``c``) parallel splits. Megatron-LM tensor parallelism (Shoeybi et al.
2019): QKV and FC1 are column-parallel, the attention projection and FC2
row-parallel, so each layer has two TP collectives forward and two backward:
all-reduces of ``T*h`` elements, or with sequence parallelism (Korthikanti et
al. 2022) an all-gather before and a reduce-scatter after each block.

Backward: each GEMM becomes a data-gradient and a weight-gradient GEMM (2x
FLOPs), flash attention backward does 2.5x its forward FLOPs (five matmuls
against two; Dao 2023), bandwidth-bound ops move about twice the bytes. With
sequence parallelism a layer keeps only its local shard of the input of each
block's first GEMM, so the backward all-gathers it again for that GEMM's weight
gradient (Korthikanti et al. 2022, Sec. 4.2.2; Megatron-Core
``LinearWithGradAccumulationAndAsyncCommunication.backward``, Transformer Engine
``LayerNormLinear``): one more all-gather per block, ``*_regather``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..compute import BYTES
from ..compute.fp8_attention import recipe_of
from ..config.workload import Workload
from ..shape import mla
from ..shape.op_sac import model_block_mms
from ..shape.plan_shape import attended_keys, microbatch_tokens
from . import fp8, lora
from .moe.eager import eager_expert_ops
from .opcopy import derive
from .stackops import attention_family, stack_of, with_stack_kernels

REGATHER = "_regather"  # suffix of the backward re-gather of a block's sharded input


@dataclass(frozen=True)
class Op:
    """One kernel or collective. ``nbytes`` is HBM traffic (mem) or message size (comm)."""

    name: str
    kind: str  # "gemm" | "attn" | "mem" | "comm"
    flops: float = 0.0
    nbytes: float = 0.0
    shape: tuple[float, float, float] = (0.0, 0.0, 0.0)  # gemm (m, n, k)
    batch: float = 1.0
    comm: str = ""  # collective name for kind == "comm"
    axis: str = ""  # "tp" | "cp" | "ep" for comms
    model_flops: float = 0.0  # FLOPs counted by MFU (attention unmasked, no recompute)
    column: bool = False  # column-parallel GEMM: its input gradient needs a TP collective
    # mem: backward bytes when not twice the forward's; comm: the backward conjugate's
    # message when not the forward's (a parallel-residual layer's attention reduction)
    bwd_nbytes: float | None = None
    # attn: (kernel family, keys per query row, head dim, causal) for the kernel's
    # efficiency (simulator/compute/attention.py); None: the topology's fitted value
    attn: tuple[str, float, float, bool] | None = None
    # gemm: the dtype it runs in when not the run's precision (a 16-bit layer of an FP8
    # run, e.g. the output projection a stack leaves out of FP8); None: the run's
    dtype: str | None = None
    # attn in FP8 (--fp8-dot-product-attention): (recipe column "fp8" / "mxfp8", pass
    # "fwd" / "bwd" / "window_fwd", sequence length) for the kernel's speed over BF16
    # (simulator/compute/fp8_attention.py); None: a BF16 kernel
    fp8_attn: tuple[str, str, float] | None = None
    # attn: its backward when not 2.5x the forward's FLOPs in the same kernel (an FP8
    # sliding-window backward runs the whole causal triangle)
    backward: Op | None = None
    # gemm: a frozen weight (LoRA's base layers, simulator/workload/lora.py): its backward
    # runs the data gradient only, no weight gradient
    frozen: bool = False


def gemm(name: str, m: float, n: float, k: float, batch: float = 1.0,
         column: bool = False, dtype: str | None = None) -> Op:
    f = 2.0 * m * n * k * batch
    return Op(name, "gemm", flops=f, shape=(m, n, k), batch=batch, model_flops=f,
              column=column, dtype=dtype)


def mem(name: str, nbytes: float, bwd_nbytes: float | None = None) -> Op:
    """A bandwidth-bound op of ``nbytes`` bytes; its backward moves ``bwd_nbytes`` (None:
    twice the forward's, a norm's or an activation's backward)."""
    return Op(name, "mem", nbytes=nbytes, bwd_nbytes=bwd_nbytes)


def rotary(nbytes: float) -> Op:
    """The rotary embedding of the query and key heads, ``nbytes`` of HBM traffic (read and
    write each element once, fused). Its backward is the same rotation by the negated angle
    on the output gradient (Su et al. 2021, RoFormer, Sec. 3.4: the rotation matrix is
    orthogonal, so its gradient is its transpose; Transformer Engine's
    ``fused_rope_backward`` is one kernel of the forward's bytes), not a norm's twice."""
    return mem("rotary", nbytes, bwd_nbytes=nbytes)


def comm(name: str, op: str, nbytes: float, axis: str, bwd_nbytes: float | None = None) -> Op:
    """A collective of ``nbytes`` (its backward conjugate's message: ``bwd_nbytes``, where
    not the same)."""
    return Op(name, "comm", nbytes=nbytes, comm=op, axis=axis, bwd_nbytes=bwd_nbytes)


@dataclass(frozen=True)
class Dims:
    """Per-GPU sizes of one micro-batch (elements, not bytes)."""

    b: int  # micro-batch size
    s: int  # full sequence length
    T: float  # tokens per GPU through GEMMs: b*s/cp
    Tn: float  # tokens per GPU through norms/dropout: T/tp with SP, else T
    h: int
    a_t: float  # attention heads per TP rank
    g_t: float  # KV groups per TP rank (GQA), at least 1
    d: int  # head dim
    ffn_t: float  # FFN width per TP rank
    glu: bool
    v_t: float  # vocabulary per TP rank
    tp: int
    cp: int
    sp: bool
    e: int  # bytes per activation element


def dims(w: Workload) -> Dims:
    m, p, tr = w.model, w.parallelism, w.training
    t, c = p.tensor, p.context
    T = microbatch_tokens(w)
    sp = p.sequence_parallel and t > 1
    return Dims(b=tr.micro_batch_size, s=m.seq_length, T=T, Tn=T / t if sp else T,
                h=m.hidden_size, a_t=m.num_attention_heads / t, g_t=max(1.0, m.groups / t),
                d=m.head_dim, ffn_t=m.ffn / t, glu=m.gated_linear_unit, v_t=m.vocab_size / t,
                tp=t, cp=c, sp=sp, e=BYTES["bf16"])


def _tp_in(x: Dims, name: str) -> list[Op]:
    """Collective entering a TP block: SP all-gather (forward); none without SP."""
    return [comm(name, "all_gather", x.T * x.h * x.e, "tp")] if x.sp and x.tp > 1 else []


def _tp_out(x: Dims, name: str) -> list[Op]:
    """Collective leaving a row-parallel GEMM: SP reduce-scatter or all-reduce."""
    if x.tp == 1:
        return []
    op = "reduce_scatter" if x.sp else "all_reduce"
    return [comm(name, op, x.T * x.h * x.e, "tp")]


def attention_core(w: Workload, x: Dims) -> list[Op]:
    """The attention core for the local query chunk against the full (causal) sequence.

    Flash attention: ``4 * b * s_q * s_k * heads * d`` FLOPs for the full square,
    half of it under the causal mask (Dao et al. 2022). Sliding-window layers
    (``model.window_size`` = ``w``, Megatron-Core; every layer but each
    ``window_attn_skip_freq``-th) attend to ``min(p, w) + 1`` keys at position ``p``, on
    average ``k_w`` (:func:`window_keys`): ``4 * b * s_q * k_w * heads * d`` FLOPs, in a
    windowed kernel whose rate follows ``k_w`` (its own half-point, from cuDNN's benchmark
    of windowed attention: :func:`simulator.compute.attention.window_fill`); Transformer
    Engine passes the window to cuDNN's fused kernel, which skips the tiles outside the
    band. The op list
    stands for every layer, so the windowed and full layers' attention appear as two ops
    weighted by their share of the layers (``attention``, ``attention_window``). Under
    context parallelism the window is not modelled (full causal attention). Without flash
    attention (Megatron 2022), the ``b*a*s*s`` score matrix is written and read
    by a fused scale-mask-softmax and a dropout (about 9 bytes per score
    element) between two batched GEMMs.

    Packed documents (``training.packed_document_length`` = ``L_w``, the length-weighted
    mean ``sum(L_i^2) / sum(L_i)``): each document attends within itself (Transformer
    Engine's THD layout with ``cu_seqlens``; flash-attention varlen), so the square is
    ``sum_i L_i^2 = s * L_w`` per sequence instead of ``s^2`` (the NeMo sequence-packing
    guide's ``sum_i s_i^2`` against ``(sum_i s_i)^2``): ``4 * b * s * L_w * heads * d``,
    half of it causal, in a kernel whose rows see ``L_w`` keys.
    """
    q = x.T  # local query tokens (s/cp per sequence, times b)
    s_k = attended_keys(w)
    full = 4.0 * q * s_k * x.a_t * x.d  # unmasked square, local queries vs all keys
    if w.model.multi_latent_attention:
        full = mla.core_flops(w.model, q, s_k, x.a_t)
    if w.training.use_flash_attn or w.model.multi_latent_attention:
        head = mla.qk_dim(w.model) if w.model.multi_latent_attention else x.d
        kernel = (attention_family(w), s_k, float(head), True)
        share = window_share(w)
        if share == 0.0 or x.cp > 1:
            return [_fp8_attention(w, x, Op("attention", "attn", flops=full * 0.5,
                                            model_flops=full, attn=kernel))]
        keys = window_keys(s_k, w.model.window_size or 0)
        band = 4.0 * q * keys * x.a_t * head * share
        ops = [_fp8_attention(w, x, Op("attention_window", "attn", flops=band,
                                       model_flops=band,
                                       attn=(kernel[0], keys, float(head), True, True)),
                              causal_flops=full * 0.5 * share, causal_kernel=kernel)]
        if share < 1.0:
            ops.insert(0, _fp8_attention(w, x, Op("attention", "attn",
                                                  flops=full * 0.5 * (1.0 - share),
                                                  model_flops=full * (1.0 - share),
                                                  attn=kernel)))
        return ops
    scores = x.b * x.a_t * (x.s / x.cp) * x.s
    return [
        Op("attn_scores", "gemm", flops=full * 0.5, shape=(x.s / x.cp, x.s, x.d),
           batch=x.b * x.a_t, model_flops=full * 0.5),
        mem("softmax_dropout", 9.0 * scores),
        Op("attn_values", "gemm", flops=full * 0.5, shape=(x.s / x.cp, x.d, x.s),
           batch=x.b * x.a_t, model_flops=full * 0.5),
    ]


def _fp8_attention(w: Workload, x: Dims, op: Op, causal_flops: float = 0.0,
                   causal_kernel: tuple[str, float, float, bool] | None = None) -> Op:
    """``op`` run in FP8 under ``--fp8-dot-product-attention`` (under context parallelism
    the ring's blocks take their FP8 speeds in :mod:`simulator.workload.context`): the
    forward and backward kernels at cuDNN's FP8 rates over BF16
    (:mod:`simulator.compute.fp8_attention`). A sliding-window layer's FP8
    backward does not skip the tiles outside the band, so it is the causal backward over
    the whole sequence: ``2.5 * causal_flops`` in the causal kernel ``causal_kernel``."""
    recipe = recipe_of(w.training)
    if not recipe or x.cp > 1:
        return op
    s_k = attended_keys(w)
    if causal_kernel is None:
        back = derive(op, name=op.name + "_bwd", flops=2.5 * op.flops,
                      model_flops=2 * op.model_flops, fp8_attn=(recipe, "bwd", s_k))
        return derive(op, fp8_attn=(recipe, "fwd", s_k), backward=back)
    back = derive(op, name=op.name + "_bwd", flops=2.5 * causal_flops,
                  model_flops=2 * op.model_flops, attn=causal_kernel,
                  fp8_attn=(recipe, "bwd", s_k))
    return derive(op, fp8_attn=(recipe, "window_fwd", s_k), backward=back)


def window_keys(s: float, window: int) -> float:
    """Mean keys per query row of causal attention over ``s`` tokens with a sliding window
    of ``window`` keys before the query (Megatron-Core / Transformer Engine ``window_size =
    (window, 0)``): row ``p`` (0-based) sees ``min(p, window) + 1`` keys. A window of
    ``s - 1`` or more is plain causal attention, ``(s + 1) / 2``."""
    k = min(float(window) + 1.0, float(s))
    return (k * (k + 1.0) / 2.0 + (s - k) * k) / s


def window_share(w: Workload) -> float:
    """Share of the layers with sliding-window attention (0..1): Megatron-Core
    ``is_layer_window_attention`` (megatron/core/transformer/utils.py): every layer when
    ``window_attn_skip_freq`` is None, else each layer whose 1-based number is not a
    multiple of it; counted over the model's layers."""
    m = w.model
    if m.window_size is None:
        return 0.0
    k = m.window_attn_skip_freq
    if k is None:
        return 1.0
    n = m.num_layers
    return (n - n // k) / n


def layer_forward(w: Workload, mlp_ffn: int | None = None) -> list[Op]:
    """Forward ops of one decoder layer on one GPU, in execution order.

    ``mlp_ffn``: width of the TP-sharded MLP; ``None`` for the model's dense
    FFN, ``0`` for none (a MoE layer without shared expert: its routed experts
    are costed by :mod:`.moe.layer`).
    """
    x = dims(w)
    if mlp_ffn is not None:
        x = replace(x, ffn_t=mlp_ffn / x.tp)
    qkv_n = (x.a_t + 2 * x.g_t) * x.d
    ops = [mem("input_layernorm", 2 * x.Tn * x.h * x.e)]
    ops += _tp_in(x, "tp_allgather_attn")
    if w.model.multi_latent_attention:
        ops += mla_projections(w, x)
    else:
        ops += [gemm("qkv", x.T, qkv_n, x.h, column=True)]
        if w.model.qk_layernorm:  # the query and key heads, each read and written once
            ops += [mem("qk_layernorm", 2 * x.T * (x.a_t + x.g_t) * x.d * x.e)]
        ops += [rotary(2 * x.T * (x.a_t + x.g_t) * x.d * x.e)]
    ops += attention_core(w, x)
    v_dim = w.model.v_head_dim if w.model.multi_latent_attention else x.d
    ops += [gemm("attn_proj", x.T, x.h, x.a_t * v_dim)]
    if w.model.use_parallel_residual and x.ffn_t > 0:
        ops += _parallel_mlp(x)
    else:
        ops += _tp_out(x, "tp_reduce_attn")
        ops += [mem("residual_layernorm", 5 * x.Tn * x.h * x.e)]
        if x.ffn_t > 0:
            ops += mlp_forward(x)
    ops += [mem("residual", 3 * x.Tn * x.h * x.e)]
    ops = with_stack_kernels(w, ops)
    casts = w.training.precision_type.casts
    if casts is not None:
        cached = 1 if w.training.disable_parameter_transpose_cache else w.num_microbatches
        ops = fp8.with_casts(ops, casts, cached, w.training.scaled_params, stack_of(w))
    return lora.with_adapters(w, ops)


def mla_projections(w: Workload, x: Dims) -> list[Op]:
    """MLA query / key-value projections, latent norms and rope (:mod:`.mla`)."""
    m = w.model
    qk, rope = mla.qk_dim(m), m.qk_pos_emb_head_dim or 0
    ops: list[Op] = []
    if m.q_lora_rank:
        ops += [gemm("q_down", x.T, m.q_lora_rank, x.h),
                mem("q_layernorm", 2 * x.T * m.q_lora_rank * x.e),
                gemm("q_up", x.T, x.a_t * qk, m.q_lora_rank, column=True)]
    else:
        ops += [gemm("q_proj", x.T, x.a_t * qk, x.h, column=True)]
    kv_lora = m.kv_lora_rank or 0
    ops += [gemm("kv_down", x.T, kv_lora + rope, x.h),
            mem("kv_layernorm", 2 * x.T * kv_lora * x.e),
            gemm("kv_up", x.T, x.a_t * ((m.qk_head_dim or 0) + (m.v_head_dim or 0)), kv_lora,
                 column=True),
            rotary(2 * x.T * (x.a_t + 1) * rope * x.e)]
    return ops


def _parallel_mlp(x: Dims) -> list[Op]:
    """The MLP of a parallel-residual layer (``model.use_parallel_residual``) and the one
    forward TP reduction of the attention and MLP outputs' sum.

    GPT-NeoX ``gpt_j_residual`` (EleutherAI/gpt-neox megatron/model/transformer.py
    ``ParallelTransformerLayer``; Hugging Face ``GPTNeoXLayer`` with
    ``use_parallel_residual``): ``x + attn(ln1(x)) + mlp(ln2(x))``, both row-parallel outputs
    left partial and reduced once. The attention's forward reduction costs nothing (zero
    bytes); its backward conjugate keeps the full message where it is its own collective:
    without sequence parallelism the attention's column-parallel input gradient is
    all-reduced apart from the MLP's (two norms, two all-reduces); under it the one
    reduce-scatter's conjugate, the output gradient's all-gather, serves both blocks.
    Bytes: the second norm reads and writes the layer input (2 B an element) and the
    partial sums are added before the reduction (3 B), as the sequential layer's residual
    add and norm (5 B). Activation memory is priced as the sequential layer's.
    """
    full = x.T * x.h * x.e
    ops: list[Op] = []
    if x.tp > 1:
        kind = "reduce_scatter" if x.sp else "all_reduce"
        ops += [comm("tp_reduce_attn", kind, 0.0, "tp", bwd_nbytes=0.0 if x.sp else full)]
    ops += [mem("residual_layernorm", 5 * x.Tn * x.h * x.e)]
    return ops + mlp_forward(x)


def mlp_forward(x: Dims) -> list[Op]:
    """Dense (Swi)GLU or plain MLP block with its TP collectives."""
    fc1_n = x.ffn_t * (2 if x.glu else 1)
    act_bytes = x.T * x.ffn_t * x.e * (3 if x.glu else 2)
    ops = _tp_in(x, "tp_allgather_mlp")
    ops += [gemm("fc1", x.T, fc1_n, x.h, column=True), mem("activation", act_bytes),
            gemm("fc2", x.T, x.h, x.ffn_t)]
    ops += _tp_out(x, "tp_reduce_mlp")
    return ops


def embedding_forward(w: Workload) -> list[Op]:
    """Word-embedding lookup (gather) on the first stage; SP scatters it for free."""
    x = dims(w)
    return [mem("embedding", 2 * x.T * x.h * x.e)]


def output_forward(w: Workload) -> list[Op]:
    """Final norm, vocabulary-parallel logits GEMM and fused cross-entropy (last stage).

    Cross-entropy reads the fp32 logits a few times (max, exp-sum, loss):
    about 3 passes of ``T * V/t * 4`` bytes (Megatron's vocab-parallel CE). Under a
    scaled precision the logits GEMM runs in 16-bit where the stack leaves the output
    layer out of FP8 (stacks/*.yaml ``fp8.output_layer_fp8: false``, e.g. torchtitan's
    ``module_filter_fn`` skips ``output``); unset, it runs in the run's precision.
    """
    x = dims(w)
    tr = w.training
    dtype = None
    if tr.precision_type.scaled and stack_of(w).fp8_output_layer is False:
        dtype = "bf16"
    ops = [mem("final_layernorm", 2 * x.Tn * x.h * x.e)]
    ops += _tp_in(x, "tp_allgather_logits")
    ops += [gemm("logits", x.T, x.v_t, x.h, column=True, dtype=dtype),
            mem("cross_entropy", 3 * x.T * x.v_t * 4)]
    return lora.with_adapters(w, with_stack_kernels(w, ops))


def backward_of(ops: list[Op]) -> list[Op]:
    """Backward ops for a forward list, in reverse order (see module docstring).

    TP collectives move to where the backward needs them: with sequence
    parallelism each all-gather becomes a reduce-scatter of the input gradient
    (right after the column-parallel GEMM's backward) and each reduce-scatter an
    all-gather; without it, the forward all-reduce after a row-parallel GEMM
    becomes an all-reduce of the input gradient after the matching
    column-parallel GEMM's backward (Megatron's ``f``/``g`` conjugate operators).
    """
    out: list[Op] = []
    pending: list[Op] = []  # forward all-reduces waiting for their column-parallel GEMM
    mirror = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather"}
    casts: dict[str, Op] = {}  # name -> the first op of that name, an FP8 cast
    for o in ops:
        if o.name.endswith(fp8.SUFFIX):
            casts.setdefault(o.name, o)
    regather = _regathers(ops)
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if op.kind == "gemm":
            cast = op.name + fp8.SUFFIX  # FP8: the output gradient is cast before dgrad/wgrad
            if cast in casts:
                out.append(fp8.backward_cast(casts[cast]))
            if i in regather:
                gather = regather[i]
                out.append(derive(gather, name=gather.name + REGATHER))
            k = 1 if op.frozen else 2  # data gradient, and the weight gradient unless frozen
            out.append(derive(op, name=op.name + "_bwd", flops=k * op.flops,
                               batch=k * op.batch, model_flops=k * op.model_flops))
            if op.column and pending:
                red = pending.pop(0)
                out.append(derive(red, name=op.name + "_input_grad_allreduce",
                                  nbytes=_bwd_message(red, red.nbytes)))
        elif op.kind == "attn" and op.backward is not None:
            out.append(op.backward)
        elif op.kind == "attn":
            out.append(derive(op, name=op.name + "_bwd", flops=2.5 * op.flops,
                               model_flops=2 * op.model_flops))
        elif op.name in casts:
            continue  # placed before its GEMM's backward above
        elif op.kind == "mem" and op.bwd_nbytes is not None:
            out.append(derive(op, name=op.name + "_bwd", nbytes=op.bwd_nbytes))
        elif op.kind == "mem":
            out.append(derive(op, name=op.name + "_bwd", nbytes=2 * op.nbytes))
        elif op.comm == "all_reduce" and op.axis == "tp":
            pending.append(op)
        elif op.axis == "tp" and casts and op.comm in mirror:
            # FP8 (TE): the output gradient a row-parallel layer gathers is cast first; the
            # input gradient a column-parallel one reduce-scatters stays bf16
            scale = (fp8.GATHER_BYTES_RATIO if op.comm == "reduce_scatter"
                     else 1.0 / fp8.GATHER_BYTES_RATIO)
            out.append(derive(op, name=op.name + "_bwd", comm=mirror[op.comm],
                              nbytes=_bwd_message(op, op.nbytes) * scale))
        else:
            out.append(derive(op, name=op.name + "_bwd", comm=mirror.get(op.comm, op.comm),
                              nbytes=_bwd_message(op, op.nbytes)))
    return out + [derive(p, nbytes=_bwd_message(p, p.nbytes)) for p in pending]


def _bwd_message(op: Op, nbytes: float) -> float:
    """Bytes of a forward collective's backward conjugate (``bwd_nbytes`` where set)."""
    return nbytes if op.kind != "comm" or op.bwd_nbytes is None else op.bwd_nbytes


def _regathers(ops: list[Op]) -> dict[int, Op]:
    """Index of the first GEMM after each forward TP all-gather -> that all-gather: the
    GEMM whose backward needs the sharded input gathered again (sequence parallelism)."""
    out: dict[int, Op] = {}
    for i, op in enumerate(ops):
        if op.kind == "comm" and op.axis == "tp" and op.comm == "all_gather":
            j = nearest_gemm(ops, i, +1)
            if j is not None:
                out[j] = op
    return out


def nearest_gemm(ops: list[Op], i: int, direction: int) -> int | None:
    """Index of the first GEMM after (``direction`` +1) or before (-1) op ``i``, or None."""
    stop = len(ops) if direction > 0 else -1
    return next((j for j in range(i + direction, stop, direction) if ops[j].kind == "gemm"),
                None)


# Forward ops each selective-recompute module re-runs before the backward (Megatron-Core
# --recompute-modules); full recompute re-runs the whole layer.
MODULE_OPS = {
    "core_attn": ("attention", "attention_window", "attn_scores", "softmax_dropout",
                  "attn_values"),
    "layernorm": ("input_layernorm", "residual_layernorm"),
    "mlp": ("tp_allgather_mlp", "fc1_fp8_cast", "fc1", "activation", "fc2_fp8_cast", "fc2",
            "tp_reduce_mlp"),
    "shared_experts": ("tp_allgather_mlp", "fc1_fp8_cast", "fc1", "activation", "fc2_fp8_cast",
                       "fc2", "tp_reduce_mlp"),
}


def op_sac_recompute(w: Workload, fwd: list[Op]) -> list[Op]:
    """Ops torchtitan's per-op SAC reruns before a block's backward
    (:mod:`simulator.shape.op_sac`): the GEMMs at even positions (wk, wo, w3 of a Llama
    block) as their share of the fused op's shape (``n`` of its ``m x n x k``), every
    bandwidth-bound op (norms, RoPE, activation, residuals, float8 casts) and the TP
    collectives but the reduce-scatters, whose outputs the policy keeps; the attention
    kernel's output is kept. Units as the forward ops'; recomputed ops count no model
    FLOPs."""
    mms = model_block_mms(w.model, w.parallelism.tensor)
    out: list[Op] = []
    for o in fwd:
        if o.kind == "gemm":
            for mm in (mm for mm in mms if mm.fused == o.name and not mm.saved):
                m, n, k = o.shape[0], mm.n, mm.k
                out.append(derive(o, name=f"{o.name}_{mm.name}_recompute", shape=(m, n, k),
                                  flops=2.0 * m * n * k * o.batch, model_flops=0.0))
        elif o.kind == "mem" or (o.kind == "comm" and o.comm != "reduce_scatter"):
            out.append(derive(o, name=o.name + "_recompute", model_flops=0.0))
    return out


def recompute_ops(w: Workload, fwd: list[Op], moe_layer: bool = False) -> list[Op]:
    """Ops re-run before a layer's backward: the whole layer under full recompute, the
    listed modules' ops under selective recompute. ``mlp`` applies to dense layers,
    ``shared_experts`` to an MoE layer's shared expert, ``moe_act`` adds the routed
    experts' activation function (bandwidth-bound, ``T*k*f_e/etp`` elements read twice
    and written once, as :func:`mlp_forward`); the whole routed block (``moe``) is
    re-costed with the experts (:mod:`.moe.layer`). Recomputed ops count no model FLOPs."""
    rc = w.training.recompute_plan
    if rc.full:
        return [derive(o, name=o.name + "_recompute", model_flops=0.0) for o in fwd]
    if rc.has("op_sac"):
        return op_sac_recompute(w, fwd)
    skip = "mlp" if moe_layer else "shared_experts"
    names = {n for mod in rc.modules if mod != skip for n in MODULE_OPS.get(mod, ())}
    ops = [derive(o, name=o.name + "_recompute", model_flops=0.0) for o in fwd
           if o.name in names]
    moe = w.model.moe
    if moe_layer and moe is not None and rc.has("moe_act") and not rc.has("moe"):
        x = dims(w)
        f_e = (moe.ffn_hidden_size or w.model.ffn) / w.parallelism.etp
        # + the eager GLU clamp inside the checkpointed function (moe/eager.py)
        clamp = eager_expert_ops(w, f_e, x.h).redo_row_bytes
        ops.append(mem("expert_activation_recompute",
                       x.T * moe.router_topk * (f_e * x.e * (3 if x.glu else 2) + clamp)))
    return ops
