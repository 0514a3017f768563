"""General activation-memory model (bytes per GPU), extending Korthikanti et al. 2022.

Korthikanti's accounting (Section 4.1) of one GPT layer, per micro-batch, is
``34*s*b*h + 5*a*s^2*b`` bytes: 16-bit tensors kept for the backward pass plus
1-byte dropout masks. We split it into the parts the paper splits:

* **replicated** ``10*s*b*h``: two norm inputs (2+2), QKV input (2), MLP input
  (2), two dropout masks (1+1; none when ``hidden_dropout`` is 0, as in Llama).
  Divided by ``t`` only with sequence parallelism.
* **attention, TP-sharded**: Q ``2*s*b*a*d``, K and V ``2*s*b*g*d`` each (GQA:
  ``g`` query groups, ``d`` head dim; equals ``6*s*b*h`` for MHA), output
  projection input ``2*s*b*a*d``. Divided by ``t``.
* **attention scores** ``5*a*s*s_kv*b`` (softmax output 2, dropout mask 1,
  dropout output 2; only the softmax output, ``2*a*s*s_kv*b``, when
  ``attention_dropout`` is 0), divided by ``t``. Flash attention (``use_flash_attn``)
  stores none of it, only softmax statistics (fp32 log-sum-exp, ``4*a*s*b``
  bytes, under 1% of the rest for head dims >= 64, neglected), so it has the
  same effect as selective recompute on this term.
* **MLP, TP-sharded**: the activation's input and output, ``2*s*b*f`` each,
  i.e. ``4*s*b*f`` (``= 16*s*b*h`` for ``f = 4h``). A gated FFN (SwiGLU) stores
  both ffn-wide inputs of the activation (gate and up projection, ``2*2*s*b*f``)
  plus its output (``2*s*b*f``): ``6*s*b*f`` bytes, by the same accounting.

Context parallelism divides the local sequence ``s`` by ``cp``; the keys span
the full sequence (``s_kv = seq_length``) only in the non-flash score term.

MoE layers replace the dense MLP by a router (fp32 logits, ``4*E`` bytes per
local token), an optional shared expert (dense-MLP accounting) and routed
experts. Each local token goes to ``topk`` experts; the busiest EP rank gets
``load`` times the uniform share, where ``load`` is the capacity factor when
one is set (drop-and-pad: buffers are sized to capacity) and otherwise the
caller's ``expert_load_factor`` (1.0 = uniform; the memory report's default is
the dropless hot rank's load, :mod:`.hot_expert`). Per GPU the routed tokens
cost ``s*b*topk*load/t * (act(f_e) + (g + c)*h*etp)`` bytes: the expert
activation (``4`` or ``6`` bytes per ffn unit, as above) plus the dispatched
input (the experts' FC1 input, ``g`` bytes per element: 2, or 1 in FP8 as for
any TE linear, below), both replicated over the ETP group, and ``c = 2`` for the 16-bit
expert output where the combine multiplies it by the routing probability and keeps it for
that probability's gradient. From Megatron-Core 0.13 the experts scale their activation
output by the probability instead (the stack profile's ``moe.probs_in_activation``,
stacks/megatron.yaml): the combine is a plain sum and keeps nothing, ``c = 0``.
``activation_func_fp8_input_store`` keeps a fused SwiGLU's input (the FC1 output) in FP8,
dense or expert. (With TP > 1
Megatron-Core requires sequence parallelism for MoE, so a TP group's tokens are
spread over its ``t`` ranks whatever the ETP.)

FP8: a Transformer Engine linear that quantizes its own input saves the FP8 copy
(1 byte per element, column-wise data only) for its weight-gradient GEMM, not the
16-bit input (TE 2.x ``transformer_engine/pytorch/module/linear.py``,
``layernorm_linear.py``, ``layernorm_mlp.py``: "Discard row-wise data since it is not
needed in backward pass"; ``saved_inputmat = inputmat``). So with ``precision: fp8``
the two norm outputs (QKV and FC1 inputs) and the FC2 input (the activation's output,
``f`` wide; an expert's too) take 1 byte, and so does the experts' dispatched FC1 input
(TE ``grouped_linear.py``: the quantized ``inputmats`` are saved with
``update_usage(rowwise_usage=False, columnwise_usage=True)``), and the output projection
adds a 1-byte copy of its input, which the attention kernel also keeps in 16-bit for its
own backward.
The norm inputs, Q/K/V and the FC1 output (the activation's input) stay 16-bit, except that
FP8 attention (``fp8_dot_product_attention``) keeps its FP8 Q/K/V (and, under delayed
scaling, its FP8 output) for the backward instead (:func:`_attention_saved_bytes`).
"""

from __future__ import annotations

from ..config.recompute import Recompute
from ..config.stacks import run_stack
from ..config.workload import Workload
from ..errors import ConfigError
from ..moe.router import is_moe_layer as moe_rule
from ..schedules import schedule_of
from ..shape.lora import activation_bytes_per_token as lora_activation_bytes_per_token
from ..shape.lora import dropout_position
from ..shape.mla import qk_dim
from ..shape.op_sac import model_block_mms
from ..shape.plan_shape import local_seq
from .hot_expert import hot_rank_load

BYTES_16 = 2.0  # bf16 / fp16 element
BYTES_FP8 = 1.0
BYTES_FP32 = 4.0


def _tokens(w: Workload) -> tuple[float, float, float]:
    """(local sequence s/cp, micro-batch b, replicated-part divisor: t with SP else 1)."""
    par = w.parallelism
    sp_div = par.tensor if par.sequence_parallel else 1
    return local_seq(w), w.training.micro_batch_size, sp_div


def _gemm_input_bytes(w: Workload) -> float:
    """Bytes per element of a saved GEMM input: 1 in FP8 (TE keeps the FP8 copy), else 2."""
    return w.training.precision_type.element_bytes


def _saved_input_bytes(w: Workload, module: str) -> float:
    """Bytes per element the backward keeps of base linear ``module``'s input (Megatron-Core
    name: ``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2``): the GEMM's own
    copy in full training (:func:`_gemm_input_bytes`). Under LoRA the frozen base keeps none
    (Transformer Engine ``linear.py``: ``backward_needs_input = is_grad_enabled and
    weight.requires_grad``; the layer-norm linears the same); a targeted module's adapter
    keeps the 16-bit input its ``A`` reads for ``A``'s weight gradient, or with ``pre``
    dropout the dropped copy, which :func:`simulator.shape.lora.activation_bytes_per_token`
    counts."""
    tr = w.training
    if tr.peft != "lora":
        return _gemm_input_bytes(w)
    if module not in tr.lora_target_modules:
        return 0.0
    pre_dropped = tr.lora_dropout > 0 and dropout_position(w) == "pre"
    return 0.0 if pre_dropped else BYTES_16


def _fc1_out_bytes(w: Workload) -> float:
    """Bytes per element of the saved FC1 output (the activation's input): 16-bit, or 1 byte
    for a fused SwiGLU under ``activation_func_fp8_input_store`` (Megatron-Core
    ``fused_bias_swiglu.py``: ``SwiGLUFunction`` / ``WeightedSwiGLUFunction`` save
    ``input.to(torch.float8_e4m3fn)``; the GeLU path and GPT-OSS's eager clamped GLU have no
    such option)."""
    m = w.model
    fp8_store = (w.training.activation_func_fp8_input_store and m.gated_linear_unit
                 and m.activation_func_clamp_value is None)
    return BYTES_FP8 if fp8_store else BYTES_16


def _mlp_bytes_per_token(w: Workload, ffn: int) -> float:
    """Bytes per token of an FFN of width ``ffn``: the FC1 output (16-bit, ``2*ffn``, twice
    that gated; 1 byte per element with the FP8 input store, :func:`_fc1_out_bytes`) and the
    FC2 input (``ffn`` elements of :func:`_gemm_input_bytes`): 6*ffn gated (SwiGLU), 4*ffn
    otherwise, one byte per ``ffn`` less in FP8."""
    fc1_out = (2.0 if w.model.gated_linear_unit else 1.0) * _fc1_out_bytes(w) * ffn
    return fc1_out + _saved_input_bytes(w, "linear_fc2") * ffn


def moe_load(w: Workload, expert_load_factor: float | None = 1.0) -> float:
    """Routed tokens on the busiest EP rank over the uniform share: the capacity factor if
    set, else ``expert_load_factor``, else (None) the dropless hot rank's load
    (:func:`~.hot_expert.hot_rank_load`, its 99th percentile over the router's draws)."""
    moe = w.model.moe
    if moe is not None and moe.capacity_factor is not None:
        return moe.capacity_factor
    if expert_load_factor is None:
        return hot_rank_load(w)
    if not expert_load_factor > 0:
        raise ConfigError("expert_load_factor", expert_load_factor, "must be a number > 0")
    return expert_load_factor


def is_moe_layer(w: Workload, layer: int) -> bool:
    """Whether global decoder layer ``layer`` (0-based) is an MoE layer (the router's rule,
    :func:`simulator.moe.is_moe_layer`, for a whole workload)."""
    return w.model.moe is not None and moe_rule(w.model.moe, layer)


def _moe_mlp_bytes(w: Workload, s: float, b: float, sp_div: float, load: float,
                   rc: Recompute) -> float:
    """MoE block: router logits, shared expert, routed experts (module docstring).

    Selective recompute drops what it re-runs: ``shared_experts`` the shared expert's
    internals, ``moe_act`` the experts' activation output (``2*f_e`` bytes per routed
    token, the FC2 input; the FC1 output stays, it is what the activation is re-run
    from), ``moe`` the whole block but its input."""
    m, par = w.model, w.parallelism
    moe = m.moe
    assert moe is not None
    if rc.has("moe"):
        return 0.0
    t = par.tensor
    router = BYTES_FP32 * s * b * moe.num_experts / sp_div
    shared = 0.0 if rc.has("shared_experts") else \
        s * b * _mlp_bytes_per_token(w, moe.shared_expert_ffn_hidden_size) / t
    f_e = moe.ffn_hidden_size or m.ffn
    routed = s * b * moe.router_topk * load / t
    act = _mlp_bytes_per_token(w, f_e) - (_saved_input_bytes(w, "linear_fc2") * f_e
                                          if rc.has("moe_act") else 0.0)
    # dispatched FC1 input (its saved GEMM input: 1 byte in FP8; none for LoRA's frozen
    # experts) and, where the combine scales the expert outputs by the routing
    # probabilities, the 16-bit expert output
    combine = 0.0 if run_stack(w.training).moe_probs_in_activation else BYTES_16
    fc1_in = _saved_input_bytes(w, "linear_fc1")
    experts = routed * (act + (fc1_in + combine) * m.hidden_size * par.etp)
    return router + shared + experts


def _attention_saved_bytes(w: Workload) -> tuple[float, float]:
    """Bytes per element the fused attention keeps of Q / K / V and of its output for the
    backward: 16-bit, or under ``fp8_dot_product_attention`` the FP8 copies of Q, K, V it
    computed with, and of the output too under delayed scaling (TE
    ``dot_product_attention/backends.py`` FusedAttnFunc: ``fp8_tensors = (q_fp8, k_fp8,
    v_fp8, out_fp8)``; with current scaling's 16-bit output and with MXFP8 the output is
    kept in 16-bit; MXFP8's block scales, 1/32 byte per element, are left out). The output in
    ``training.attention_output_store_bits`` (12 for DeepSeek-V3's E5M6 cache) where that is
    fewer than 16."""
    tr = w.training
    out = tr.attention_output_store_bits / 8.0  # 2 B, or DeepSeek-V3's E5M6 (1.5 B)
    if not (tr.fp8_dot_product_attention and tr.precision_type.scaled):
        return BYTES_16, out
    return 1.0, (1.0 if tr.fp8_recipe == "delayed" else out)


def _recompute_for(w: Workload, recompute: str | None) -> Recompute:
    """The workload's recompute setting, or the one ``recompute`` names: ``"none"``,
    ``"full"``, or ``"selective"`` (the workload's modules when it is selective, else its
    stack's selective modules: Megatron's default ``[core_attn]``)."""
    rc = w.training.recompute_plan
    if recompute is None or recompute == rc.granularity:
        return rc
    if recompute == "selective":
        return Recompute("selective", modules=run_stack(w.training).selective_modules)
    if recompute == "full":
        return Recompute("full")
    return Recompute()


def activation_bytes_per_layer(w: Workload, moe_layer: bool = False,
                               expert_load_factor: float = 1.0,
                               recompute: str | None = None) -> float:
    """Bytes of activations one GPU keeps for one layer and one micro-batch.

    ``recompute`` defaults to the workload's setting (``training.recompute_plan``):
    none keeps everything above; full keeps the 16-bit layer input only, ``2*s*b*h``
    (divided by ``t`` with SP, as Megatron checkpoints the sequence-parallel shard);
    selective drops each listed module's internals: ``core_attn`` the attention-score
    term (Korthikanti Section 5), ``layernorm`` the two norm outputs (QKV and FC1
    inputs, ``4*s*b*h/t_sp``), ``mlp`` the dense MLP term, ``moe`` / ``moe_act`` /
    ``shared_experts`` as :func:`_moe_mlp_bytes`. Units: bytes. Source: Korthikanti et
    al. 2022, Table 2, extended as described in the module docstring; module names
    from Megatron-Core ``--recompute-modules``.
    """
    m, par, tr = w.model, w.parallelism, w.training
    rc = _recompute_for(w, recompute)
    if rc.has("mla_up_proj") and not m.multi_latent_attention:
        raise ConfigError("training.recompute_modules", "mla_up_proj",
                          "needs multi-latent attention, which this model does not use")
    s, b, sp_div = _tokens(w)
    h, t = m.hidden_size, par.tensor
    if rc.full:
        return BYTES_16 * s * b * h / sp_div
    if rc.has("op_sac"):
        return s * b * _op_sac_bytes_per_token(w, sp_div)
    # Korthikanti's 10sbh holds two 1-byte dropout masks (after attention and
    # after the MLP); a model trained without hidden dropout (Llama) keeps none.
    masks = 2.0 if m.hidden_dropout > 0 else 0.0
    norms_out = 0.0 if rc.has("layernorm") else (_saved_input_bytes(w, "linear_qkv")
                                                  + _saved_input_bytes(w, "linear_fc1"))
    replicated = (4.0 + norms_out + masks) * s * b * h / sp_div
    qd, kvd = m.num_attention_heads * m.head_dim, m.groups * m.head_dim
    # Q, K, V and the attention output (the output projection's input); in FP8 the
    # projection keeps its own 1-byte copy beside the attention's 16-bit one
    # (a frozen LoRA base keeps none; an adapter reads the attention's own 16-bit output)
    proj_copy = tr.precision_type.element_bytes * qd \
        if tr.precision_type.scaled and tr.peft != "lora" else 0.0
    # --qk-layernorm: the norms keep their inputs, the query and key heads before the norm
    qk_norm_in = BYTES_16 * (qd + kvd) if m.qk_layernorm else 0.0
    qkv_b, out_b = _attention_saved_bytes(w)
    attention = s * b * (qkv_b * (qd + 2 * kvd) + out_b * qd + proj_copy + qk_norm_in) / t
    if m.multi_latent_attention:
        # MLA (workload/mla.py): Q and K of a*(qk+rope) and V of a*v per token (the up
        # projections' outputs; recomputed, not kept, with recompute_modules mla_up_proj)
        # and the output-projection input a*v, TP-sharded; the q / kv latents (normed
        # inputs of the up projections) replicated over TP.
        a, v = m.num_attention_heads, m.v_head_dim or 0
        latents = (m.q_lora_rank or 0) + (m.kv_lora_rank or 0) + (m.qk_pos_emb_head_dim or 0)
        qkv = 0.0 if rc.has("mla_up_proj") else 2 * a * qk_dim(m) + a * v
        attention = s * b * ((qkv_b * qkv + out_b * a * v) / t + BYTES_16 * latents)
    scores = 0.0
    if not tr.use_flash_attn and not rc.has("core_attn"):
        # softmax output (2) + dropout mask (1) + dropout output (2); softmax only
        # without attention dropout
        per = 5.0 if m.attention_dropout > 0 else 2.0
        scores = per * m.num_attention_heads * s * m.seq_length * b / t
    if moe_layer and m.moe is not None:
        mlp = _moe_mlp_bytes(w, s, b, sp_div, moe_load(w, expert_load_factor), rc)
    elif rc.has("mlp"):
        mlp = 0.0
    else:
        mlp = s * b * _mlp_bytes_per_token(w, m.ffn) / t
    # LoRA adapters (simulator/shape/lora.py): A's output, dropout mask and dropped input
    adapters = s * b * lora_activation_bytes_per_token(w)
    return replicated + attention + scores + mlp + adapters


def _op_sac_bytes_per_token(w: Workload, sp_div: float) -> float:
    """Bytes one token keeps in one layer under torchtitan's per-op SAC
    (:mod:`simulator.shape.op_sac`): the block's 16-bit input (``2*h``, SP-sharded), the
    16-bit outputs of the GEMMs the policy keeps (wq, wv, w1, w2 of a Llama block; a
    row-parallel GEMM's output is its full-width partial sum), the attention output
    (``2*q``) and its fp32 log-sum-exp (4 B per head), and with sequence-parallel TP the
    two reduce-scatter outputs (``2*h/t`` each). Units: bytes per token."""
    m, t = w.model, w.parallelism.tensor
    q = m.num_attention_heads * m.head_dim / t
    kept = sum(mm.n for mm in model_block_mms(m, t) if mm.saved)
    reduce_scatter = 2 * m.hidden_size / t if w.parallelism.sequence_parallel and t > 1 \
        else 0.0
    return BYTES_16 * (m.hidden_size / sp_div + kept + q + reduce_scatter) \
        + BYTES_FP32 * m.num_attention_heads / t


def microbatches_in_flight(w: Workload, stage: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in units of
    the stage's layers: the schedule's own count
    (:meth:`simulator.schedules.Schedule.in_flight`; GPipe ``m``, 1F1B
    ``min(p - stage, m)``, interleaved per Korthikanti 2022 Sec. 4.2.3, ...)."""
    par = w.parallelism
    return schedule_of(par).in_flight(
        par.pipeline, w.num_microbatches, par.vp, stage)


def embedding_activation_bytes(w: Workload) -> float:
    """Input embedding's dropout mask, ``s*b*h`` bytes (1 byte, SP-sharded); Korthikanti 4.3."""
    s, b, sp_div = _tokens(w)
    return s * b * w.model.hidden_size / sp_div


def te_fused_cross_entropy(w: Workload) -> bool:
    """Whether the loss is TE's fused cross-entropy (``cross_entropy_loss_fusion`` with
    ``cross_entropy_fusion_impl: te``): it saves the 16-bit logits and per-token
    statistics only, and its backward writes the gradient into the logits in place
    (TE ``transformer_engine/pytorch/cross_entropy.py``, ``CrossEntropyFunction``)."""
    tr = w.training
    return tr.cross_entropy_loss_fusion and tr.cross_entropy_fusion_impl == "te"


def output_activation_bytes(w: Workload) -> float:
    """Last stage head: final-norm and output-layer inputs (``2*2*s*b*h``, SP-sharded) and
    fp32 logits for the vocab-parallel cross-entropy (``4*s*b*V/t``), Korthikanti 4.3; with
    TE's fused cross-entropy the 16-bit logits instead (``2*s*b*V/t``).

    With torchtitan's chunked loss (``training.loss_num_chunks`` > 1; ``ChunkedLossWrapper``,
    pytorch/torchtitan ``torchtitan/components/loss.py``) the output layer and the loss run
    forward and backward on one slice of the tokens at a time inside the forward, so no
    logits outlive their slice; the hidden states' gradient is gathered instead, into an
    fp32 buffer of ``4*s*b*h`` bytes (``GradAccumulator(..., dtype=torch.float32)``), kept
    until the decoder's backward."""
    s, b, sp_div = _tokens(w)
    t = w.parallelism.tensor
    inputs = 2 * BYTES_16 * s * b * w.model.hidden_size / sp_div
    if w.training.loss_num_chunks > 1:
        return inputs + BYTES_FP32 * s * b * w.model.hidden_size
    logit = BYTES_16 if te_fused_cross_entropy(w) else BYTES_FP32
    return inputs + logit * s * b * w.model.vocab_size / t


def logits_transient_bytes(w: Workload) -> float:
    """The 16-bit logits alive beside their fp32 copy, ``2*s*b*V/t`` bytes, last stage.

    Megatron's vocab-parallel cross-entropy (``megatron/core/tensor_parallel/cross_entropy.py``)
    casts the output layer's bf16 logits to fp32 and keeps the fp32 softmax for the
    backward (counted in :func:`output_activation_bytes`); while it does, and again while
    the backward turns the fp32 gradient back into bf16 for the output layer, a 16-bit
    tensor of the same shape coexists: 6 bytes per logit at the peak, not 4. Megatron-LM's
    logged allocator peaks (validation/memory.yaml) show this term; Megatron's own
    estimator (theoretical_memory_usage.py) leaves it out. None with TE's fused
    cross-entropy, which keeps no fp32 copy. With torchtitan's chunked loss, one slice's
    16-bit logits and their fp32 copy (``6*s*b*V/(t*n)``, ``n = loss_num_chunks``)."""
    s, b, _ = _tokens(w)
    n = w.training.loss_num_chunks
    if n > 1:
        return (BYTES_16 + BYTES_FP32) * s * b * w.model.vocab_size / w.parallelism.tensor / n
    if te_fused_cross_entropy(w):
        return 0.0
    return BYTES_16 * s * b * w.model.vocab_size / w.parallelism.tensor
