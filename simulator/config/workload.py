"""Workload schema: model, parallel plan and training settings.

Field names follow Megatron-LM's command-line arguments so users can paste
from real launch scripts (``--num-layers`` becomes ``num_layers``). Sizes are
plain counts; this file holds no physical units. Cross-field rules that need
the topology (GPU counts, NVLink domain sizes) live in
:mod:`simulator.config.validate`.
"""

from __future__ import annotations

from typing import Any, Literal

from ..errors import ConfigError
from ..precision import FP4_RECIPES, NAMES, RECIPES, Precision, precision_of
from .bounds import integer, real
from .recompute import MODULES, Recompute, resolve_recompute
from .schema import Field, Schema, check

# Upper bounds far beyond any published model (DeepNet trained 1,000 layers; the
# longest contexts are ~10M tokens; the widest models ~30k hidden). They exist so
# that a mistyped size gets a clear error instead of exhausting memory or
# overflowing float64 somewhere downstream.
MAX_LAYERS = 10_000
MAX_WIDTH = 2**20  # hidden, per-head and attention-head counts
MAX_FFN = 2**24  # FFN widths, vocabulary
MAX_TOKENS = 2**30  # sequence length, and micro-batch size times sequence length
MAX_EXPERTS = 2**16
MAX_BATCH = 2**40  # sequences per step

# Bounded numbers (simulator/config/bounds.py: prebuilt schemas, same errors as Field limits).
PositiveInt = integer(gt=0)
# smallest --ddp-bucket-size priced (parameters): buckets are split evenly, and below about
# one weight matrix Megatron-Core's buckets would be whole tensors instead
MIN_DDP_BUCKET = 1_000_000
Layers = integer(gt=0, le=MAX_LAYERS)
Width = integer(gt=0, le=MAX_WIDTH)
Ffn = integer(gt=0, le=MAX_FFN)
Tokens = integer(gt=0, le=MAX_TOKENS)
Experts = integer(gt=0, le=MAX_EXPERTS)
Batch = integer(gt=0, le=MAX_BATCH)
Count = integer(ge=0)
FfnOrZero = integer(ge=0, le=MAX_FFN)
LayersOrZero = integer(ge=0, le=MAX_LAYERS)
MtpDepth = integer(ge=0, le=16)
Capacity = real(gt=0, le=1000)
Skew = real(ge=0, le=100)
Dropout = real(ge=0, lt=1)
Momentum = real(ge=0, lt=1)
LoraRank = integer(gt=0, le=MAX_WIDTH)
ClampValue = real(gt=0, le=1e6)
Headroom = real(ge=0, le=1e6)
DocTokens = real(gt=0, le=MAX_TOKENS)


class MoEConfig(Schema):
    """Mixture-of-experts block (Megatron-Core ``--num-experts`` family)."""

    num_experts: Experts
    router_topk: PositiveInt = 2
    ffn_hidden_size: Ffn | None = None  # per expert; default: model's
    shared_expert_ffn_hidden_size: FfnOrZero = 0
    layer_freq: PositiveInt = 1  # every k-th layer is MoE
    first_k_dense: Count = 0  # dense layers before the first MoE layer
    # None = dropless; above num_experts/router_topk nothing is ever dropped.
    capacity_factor: Capacity | None = None
    max_nodes_per_token: PositiveInt | None = None  # DeepSeek-V3 node-limited routing
    # Megatron-Core --moe-router-num-groups / --moe-router-group-topk: group-limited
    # routing (experts in equal groups of consecutive experts; a token picks its top-k
    # inside group_topk selected groups). Shapes the DeepEP volume (workload/moe/dispatch.py).
    router_num_groups: PositiveInt | None = None
    router_group_topk: PositiveInt | None = None
    router_load: Literal["uniform", "skewed", "trace"] = "uniform"
    router_skew: Skew = 0.0  # log-normal sigma; real routers: 0-3
    router_trace: str | None = None
    balancing: Literal["none", "aux_loss", "aux_free_bias"] = "none"
    # Megatron-Core --moe-token-dispatcher-type; "flex" = DeepEP / HybridEP kernels
    # (--moe-enable-deepep implies flex). Costs: simulator/moe/dispatcher.py.
    token_dispatcher_type: Literal["alltoall", "allgather", "flex"] = "alltoall"
    enable_deepep: bool = False
    # Megatron-Core --overlap-moe-expert-parallel-comm (EP all-to-all of one micro-batch
    # under another's compute) and --moe-shared-expert-overlap.
    overlap_moe_expert_parallel_comm: bool = False
    shared_expert_overlap: bool = False
    # Megatron-Core --moe-router-fusion (TE fused top-k / score / aux-loss kernels),
    # --moe-permute-fusion (TE fused permute / unpermute) and
    # --moe-pad-expert-input-to-capacity (with a capacity factor: fixed expert shapes, no
    # host sync). Kernel launches per layer: simulator/workload/moe/host.py.
    router_fusion: bool = False
    permute_fusion: bool = False
    pad_expert_input_to_capacity: bool = False

    @check
    def _check(self) -> None:
        if self.enable_deepep and self.token_dispatcher_type != "flex":
            raise ConfigError("model.moe.token_dispatcher_type", self.token_dispatcher_type,
                              "must be 'flex' when enable_deepep is true (Megatron-Core)")
        if self.router_topk > self.num_experts:
            raise ConfigError("model.moe.router_topk", self.router_topk,
                              f"must be at most num_experts ({self.num_experts})")
        self._check_groups()
        if self.router_load == "trace" and not self.router_trace:
            raise ConfigError("model.moe.router_trace", None,
                              "a CSV path is required when router_load is 'trace'")
        if self.pad_expert_input_to_capacity and self.capacity_factor is None:
            raise ConfigError("model.moe.pad_expert_input_to_capacity", True,
                              "needs model.moe.capacity_factor (Megatron-Core: padding is to "
                              "the expert capacity)")


    def _check_groups(self) -> None:
        n, g = self.router_num_groups, self.router_group_topk
        if (n is None) != (g is None):
            field = "model.moe.router_group_topk" if n is not None else \
                "model.moe.router_num_groups"
            raise ConfigError(field, None, "router_num_groups and router_group_topk are set "
                              "together (Megatron-Core group-limited routing)")
        if n is None:
            return
        if self.max_nodes_per_token is not None:
            raise ConfigError("model.moe.max_nodes_per_token", self.max_nodes_per_token,
                              "set either it or router_num_groups / router_group_topk "
                              "(node-limited routing is group-limited routing with one group "
                              "per node)")
        if self.num_experts % n:
            raise ConfigError("model.moe.router_num_groups", n,
                              f"must divide num_experts ({self.num_experts})")
        if g > n:
            raise ConfigError("model.moe.router_group_topk", g,
                              f"must be at most router_num_groups ({n})")
        if self.router_topk > g * (self.num_experts // n):
            raise ConfigError("model.moe.router_topk", self.router_topk,
                              f"must be at most the experts of the selected groups "
                              f"(router_group_topk {g} x {self.num_experts // n} per group)")


class ModelConfig(Schema):
    """Transformer decoder shape (Megatron-LM argument names)."""

    name: str = "model"
    num_layers: Layers
    hidden_size: Width
    num_attention_heads: Width
    num_query_groups: Width | None = None  # GQA; default = heads
    kv_channels: Width | None = None  # default hidden/heads
    ffn_hidden_size: Ffn | None = None  # default 4*hidden
    gated_linear_unit: bool = False  # SwiGLU: three FFN matrices instead of two
    # --qk-layernorm: RMSNorm of every query and key head after the QKV projection (Qwen3),
    # two Transformer Engine norm kernels (megatron/core/transformer/attention.py TENorm)
    qk_layernorm: bool = False
    vocab_size: Ffn
    seq_length: Tokens
    untie_embeddings_and_output_weights: bool = False
    hidden_dropout: Dropout = 0.1  # Megatron default; Llama: 0
    attention_dropout: Dropout = 0.1  # Megatron default; Llama: 0
    moe: MoEConfig | None = None
    # Multi-latent attention (DeepSeek-V2/V3), Megatron-Core names; see shape/mla.py.
    multi_latent_attention: bool = False
    q_lora_rank: Width | None = None  # None: no query compression
    kv_lora_rank: Width | None = None
    qk_head_dim: Width | None = None
    qk_pos_emb_head_dim: Width | None = None
    v_head_dim: Width | None = None
    mtp_num_layers: MtpDepth = 0  # multi-token prediction depth (DeepSeek-V3: 1)
    # Megatron-Core add_bias_linear (GPT-OSS: true): biases on the linear layers; the routed
    # experts' FC2 bias is added outside the grouped GEMM (simulator/workload/moe/eager.py).
    add_bias_linear: bool = False
    # Hugging Face GPT-NeoX use_parallel_residual (GPT-NeoX's gpt_j_residual, GPT-J, Pythia):
    # attention and MLP read the same layer input and their outputs are summed into the
    # residual together, so a TP forward reduces the sum once (simulator/workload/ops.py).
    use_parallel_residual: bool = False
    # Megatron-Core activation_func_clamp_value (GPT-OSS: 7.0): the GLU inputs are clamped
    # before the fused activation, as separate kernels (simulator/workload/moe/eager.py).
    activation_func_clamp_value: ClampValue | None = None
    # Megatron-Core window_size (its left element: keys before the query; GPT-OSS 128) and
    # window_attn_skip_freq (every k-th layer, 1-based, keeps full attention; None: every
    # layer windowed): sliding-window attention, costed in simulator/workload/ops.py.
    window_size: Tokens | None = None
    window_attn_skip_freq: PositiveInt | None = None

    @check
    def _check(self) -> None:
        if self.multi_latent_attention:
            for f in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
                if getattr(self, f) is None:
                    raise ConfigError(f"model.{f}", None,
                                      "required when model.multi_latent_attention is true")
        if self.window_attn_skip_freq is not None and self.window_size is None:
            raise ConfigError("model.window_attn_skip_freq", self.window_attn_skip_freq,
                              "needs model.window_size (Megatron-Core: the skip frequency "
                              "selects which layers keep full attention)")
        groups = self.num_query_groups or self.num_attention_heads
        if self.num_attention_heads % groups:
            raise ConfigError("model.num_query_groups", groups,
                              f"must divide num_attention_heads ({self.num_attention_heads})")
        if self.kv_channels is None and self.hidden_size % self.num_attention_heads:
            raise ConfigError("model.hidden_size", self.hidden_size,
                              f"must be divisible by num_attention_heads "
                              f"({self.num_attention_heads}) unless kv_channels is given")

    # Resolved defaults (Megatron's rules), so callers never repeat them.
    @property
    def groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size


# What turning pipelining off in a shipped pipelined workload takes, said once for both checks
_NO_PIPELINE = (" (without pipelining set parallelism.virtual_pipeline=null and "
                "parallelism.pipeline_schedule=1f1b)")


class ParallelConfig(Schema):
    """Parallel plan: degrees of each axis and the pipeline schedule."""

    tensor: PositiveInt = 1
    pipeline: PositiveInt = 1
    data: PositiveInt = 1
    context: PositiveInt = 1
    context_parallel_algo: Literal["ring", "ring_zigzag", "ulysses", "hybrid"] = "ring_zigzag"
    expert: PositiveInt = 1
    expert_tensor: PositiveInt | None = None  # ETP; default = tensor (Megatron-Core)
    virtual_pipeline: PositiveInt | None = None
    # Megatron-Core --microbatch-group-size-per-virtual-pipeline-stage: micro-batches each
    # virtual stage runs in a row in the interleaved schedule (default: pipeline)
    microbatch_group_size_per_vp_stage: PositiveInt | None = None
    sequence_parallel: bool = False
    # Any schedule registered in simulator.schedules (one file each); checked, with the
    # schedule's own rules (virtual_pipeline, micro-batch count), by shape.validate.
    pipeline_schedule: str = "1f1b"
    decoder_first_pipeline_num_layers: PositiveInt | None = None
    decoder_last_pipeline_num_layers: PositiveInt | None = None
    # Megatron-Core: the embedding / the loss count as one layer of the first / last
    # pipeline stage when the layers are split (--account-for-*-in-pipeline-split).
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    # Megatron-Core's explicit layout, e.g. "Et*3|(tt|)*29|L": one segment per (virtual)
    # stage in order vpp(0)pp(0), vpp(0)pp(1), ...; E embedding, t decoder layer, L loss.
    pipeline_model_parallel_layout: str | None = Field(None, max_length=100_000)
    rank_order: str = "tp-cp-ep-dp-pp"

    @check
    def _check(self) -> None:
        axes = self.rank_order.split("-")
        if sorted(axes) != sorted(["tp", "cp", "ep", "dp", "pp"]):
            raise ConfigError("parallelism.rank_order", self.rank_order,
                              "must order tp, cp, ep, dp, pp once each, joined by '-'")
        vp = self.virtual_pipeline or 1
        if vp > 1 and self.pipeline == 1:
            raise ConfigError("parallelism.virtual_pipeline", vp,
                              "needs parallelism.pipeline > 1" + _NO_PIPELINE)
        if self.pipeline == 1 and self.pipeline_schedule == "interleaved":
            raise ConfigError("parallelism.pipeline_schedule", self.pipeline_schedule,
                              "needs parallelism.pipeline > 1" + _NO_PIPELINE)

    @property
    def vp(self) -> int:
        return self.virtual_pipeline or 1

    @property
    def etp(self) -> int:
        return self.expert_tensor or self.tensor

    @property
    def num_gpus(self) -> int:
        return self.tensor * self.pipeline * self.data * self.context

    @property
    def expert_dp(self) -> int:
        """Expert-DP size ``(DP*CP*TP) / (EP*ETP)`` (Megatron-Core MoE parallel folding; at
        least 1). :func:`simulator.shape.params.expert_data_parallel` checks it divides."""
        return max(1, self.data * self.context * self.tensor // (self.expert * self.etp))


class TrainingConfig(Schema):
    """Batch, precision, recompute and overlap switches (Megatron-LM names)."""

    global_batch_size: Batch
    micro_batch_size: Tokens = 1
    recompute: Literal["none", "selective", "full"] = "none"
    precision: Literal[NAMES] = "bf16"  # simulator/precision.py: one entry per format
    distributed_optimizer: bool = True
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False
    # Megatron's --async-tensor-model-parallel-allreduce (default on since late 2021):
    # the input-gradient TP collective runs beside the weight-gradient GEMM.
    async_tensor_model_parallel_allreduce: bool = True
    # Megatron keeps fp32 main grads and reduces in fp32 for bf16 (its default); NeMo's
    # performance recipes set grad_reduce_in_fp32 False: bf16 grads, half the bytes.
    grad_reduce_in_fp32: bool = True
    use_flash_attn: bool = True
    # Megatron-Core apply_rope_fusion (Megatron-LM default; --no-rope-fusion turns it off):
    # one TE kernel per rotated tensor (MLA: fused_apply_mla_rope) instead of the eager
    # rotate-half sequence; counted in the host's kernel launches (workload/moe/host.py).
    apply_rope_fusion: bool = True
    # Megatron-Core --cuda-graph-impl / --cuda-graph-scope: graphed parts of a layer launch
    # as one graph instead of kernel by kernel (simulator/workload/moe/host.py);
    # "full_iteration" graphs the whole step (needs sync-free dropless MoE: Megatron's
    # paged stash / padded experts).
    cuda_graph_impl: Literal["none", "local", "transformer_engine", "full_iteration"] = "none"
    cuda_graph_scope: list[Literal["full", "attn", "mlp", "moe", "moe_router",
                                   "moe_preprocess"]] = Field(default_factory=lambda: ["full"])
    # Megatron-Core's older --enable-cuda-graph: the same as cuda_graph_impl "local"
    enable_cuda_graph: bool = False
    # Megatron-Core use_transformer_engine_op_fuser: the routed experts run as Transformer
    # Engine fused ops (GroupedLinear, ScaledClampedQGeGLU, scaled bias), so the clamp and
    # the expert FC2 bias cost no eager kernels (simulator/workload/moe/eager.py).
    use_transformer_engine_op_fuser: bool = False

    @property
    def graph_impl(self) -> str:
        """The CUDA-graph implementation in force (``enable_cuda_graph``: "local")."""
        if self.cuda_graph_impl == "none" and self.enable_cuda_graph:
            return "local"
        return self.cuda_graph_impl
    seed: Count = 0
    # Megatron-Core precision-aware optimizer (--use-precision-aware-optimizer and the
    # dtypes it allows): main (master) params, main grads and Adam moments below fp32.
    # bf16 main params is Apex DistributedFusedAdam's dtype=bf16 (NeMo 1.0 recipes).
    use_precision_aware_optimizer: bool = False
    main_params_dtype: Literal["fp32", "fp16", "bf16"] = "fp32"
    main_grads_dtype: Literal["fp32", "bf16"] | None = None  # None: per grad_reduce_in_fp32
    exp_avg_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = "fp32"
    exp_avg_sq_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = "fp32"
    # Megatron-Core --optimizer and --sgd-momentum (megatron/training/arguments.py, NVIDIA/
    # Megatron-LM d98e8a64: adam default, sgd, lion; its muon and soap, whose Newton-Schulz
    # and preconditioner compute is not costed here, are not offered). State per parameter
    # beside the main copy (simulator/memory/states.py): Adam's two moments (exp_avg,
    # exp_avg_sq), Lion's one (exp_avg), SGD's momentum buffer (exp_avg_dtype) unless
    # sgd_momentum is 0.
    optimizer: Literal["adam", "sgd", "lion"] = "adam"
    sgd_momentum: Momentum = 0.9
    # --fp8-param-gather (NeMo: fp8_params): weights stored in FP8, no bf16 copy.
    fp8_param_gather: bool = False
    # Megatron-Core --fp8-recipe (Megatron-Bridge: fp8 "delayed" / "cs" = tensorwise / "mx"
    # = mxfp8). The step's costs treat every recipe alike (workload/fp8.py); the recipe
    # decides the synchronisation: "delayed" all-reduces the amaxes over the TP x DP x CP
    # group at every fp8_autocast exit, once per model chunk and micro-batch in the forward
    # and again in the backward (--tp-only-amax-red: over the TP x CP group only), which
    # makes those phases job-wide barriers (simulator/metrics/variability.py).
    fp8_recipe: Literal[RECIPES] = "delayed"
    tp_only_amax_red: bool = False
    # Megatron-Core --fp4-recipe (with precision fp4, Megatron's --fp4-format e2m1;
    # Megatron-Bridge bf16_with_nvfp4_mixed): Transformer Engine's NVFP4BlockScaling, the
    # linears' three GEMMs in NVFP4 (simulator/precision.py).
    fp4_recipe: Literal[FP4_RECIPES] = "nvfp4"
    # --fp4-param-gather (Megatron-Bridge fp4_param_gather): weights stored in NVFP4 and
    # all-gathered in it, no 16-bit copy.
    fp4_param_gather: bool = False
    # Megatron-Core --first-last-layers-bf16 with --num-layers-at-start-in-bf16 /
    # --num-layers-at-end-in-bf16 (TransformerConfig defaults 1 / 1; Megatron-Bridge
    # MixedPrecisionConfig, e.g. its NVFP4 Nemotron recipe's 14 at the end): those decoder
    # layers run outside the FP8 / FP4 context (megatron/core/fp8_utils.py get_fp8_context,
    # fp4_utils.py get_fp4_context: a null context), so their GEMMs, attention, weights
    # and saved inputs are 16-bit (simulator/workload/chunk_cost.py, memory/).
    first_last_layers_bf16: bool = False
    num_layers_at_start_in_bf16: LayersOrZero = 1
    num_layers_at_end_in_bf16: LayersOrZero = 1
    # --fp8-dot-product-attention (Megatron-Bridge mixed_precision.fp8_dot_product_attention):
    # the fused attention kernel runs in FP8 (MXFP8 under the mxfp8 recipe), at the rates of
    # cuDNN's FP8 SDPA relative to BF16 (simulator/compute/fp8_attention.py).
    fp8_dot_product_attention: bool = False
    # Megatron's explicit recompute arguments; `recompute` above is their shorthand.
    recompute_granularity: Literal["selective", "full"] | None = None
    recompute_method: Literal["uniform", "block"] | None = None
    recompute_num_layers: Layers | None = None
    recompute_modules: tuple[str, ...] | None = None
    # --activation-func-fp8-input-store: the fused SwiGLU (dense MLP and experts) saves its
    # input for the backward as FP8, 1 byte per element (Megatron-Core fused_bias_swiglu.py
    # SwiGLUFunction / WeightedSwiGLUFunction, fp8_input_store; simulator/memory/activations.py).
    activation_func_fp8_input_store: bool = False
    # Bits per element in which the attention output (the core's output, kept for its own
    # backward and for the output projection's weight gradient) is cached: 16, or 12 for
    # DeepSeek-V3's E5M6 (DeepSeek-AI 2024, arXiv:2412.19437, Sec. 3.3 "Low-Precision
    # Storage": "the inputs of the Linear after the attention operator" in E5M6). No
    # Megatron-Core argument sets it; it states a published run's memory saving.
    attention_output_store_bits: Literal[16, 12] = 16
    # --cpu-offloading: activations of the first `cpu_offloading_num_layers` layers of
    # a chunk go to host memory over the host link and come back for the backward.
    cpu_offloading: bool = False
    cpu_offloading_num_layers: LayersOrZero = 0
    # Margin a plan must leave free on every GPU to count as fitting (planning only).
    memory_headroom_GB: Headroom = 0.0
    # Megatron-FSDP (Megatron-Core --use-megatron-fsdp, Megatron-Bridge ddp.use_megatron_fsdp)
    # and its ZeRO level over the data x context ranks (--data-parallel-sharding-strategy):
    # optim shards the optimizer state (ZeRO-1, as the distributed optimizer), optim_grads
    # also the gradients (ZeRO-2), optim_grads_params also the weights (ZeRO-3; Megatron's
    # default under FSDP). Sharded gradients are reduce-scattered after every micro-batch's
    # backward and sharded weights all-gathered before every forward and backward
    # (simulator/workload/fsdp.py); without FSDP the strategy is not read, so setting it
    # alone is refused.
    use_megatron_fsdp: bool = False
    data_parallel_sharding_strategy: Literal["no_shard", "optim", "optim_grads",
                                             "optim_grads_params"] | None = None
    # Megatron-Core DDP num_distributed_optimizer_instances (--num-distributed-optimizer-
    # instances; Megatron-Bridge ddp.num_distributed_optimizer_instances): the partial
    # distributed optimizer. The DP x CP ranks split into this many instances of
    # consecutive ranks; the optimizer state (under Megatron-FSDP also the gradients and
    # weights) is sharded inside an instance and replicated across them. Each gradient
    # bucket is reduce-scattered inside the instance, then its shard all-reduced across
    # the instances; weights are gathered inside the instance (simulator/workload/
    # step_input.py). Under Megatron-FSDP this is HSDP, and outer_dp_sharding_strategy
    # "optim" also shards the optimizer state across the instances (HFSDP).
    num_distributed_optimizer_instances: PositiveInt = 1
    # Megatron-Core --ddp-bucket-size (DistributedDataParallelConfig.bucket_size; NeMo and
    # Megatron-Bridge ddp.bucket_size): parameters per gradient bucket. None: Megatron-Core's
    # max(40e6, 1e6 x dp) (distributed_data_parallel.py; simulator/workload/step_input.py)
    ddp_bucket_size: PositiveInt | None = None
    outer_dp_sharding_strategy: Literal["no_shard", "optim"] = "no_shard"
    # Megatron-FSDP keeps the FP8 transposes of the gathered weights across micro-batches
    # (Megatron-Core DDP keep_fp8_transpose_cache; Megatron-Bridge sets it False for FSDP)
    keep_fp8_transpose_cache: bool = False
    # Megatron-Core --disable-parameter-transpose-cache (TransformerConfig; Megatron-Bridge's
    # fine-tuning recipes set it): TE gets no is_first_microbatch, so the FP8 weights (their
    # cast, or with fp8_param_gather their transpose) are rebuilt every micro-batch instead of
    # once a step (simulator/workload/fp8.py).
    disable_parameter_transpose_cache: bool = False
    # Megatron-Core --cross-entropy-loss-fusion / --cross-entropy-fusion-impl (Megatron-Bridge
    # defaults: True / "te"): TE's fused cross-entropy keeps the 16-bit logits only and
    # writes their gradient in place (simulator/memory/activations.py)
    cross_entropy_loss_fusion: bool = False
    cross_entropy_fusion_impl: Literal["native", "te"] = "native"
    # Parameter-efficient fine-tuning (Megatron-Bridge ``peft: lora``, its LoRA dataclass
    # ``dim``, ``dropout``, ``dropout_position``, ``target_modules``; NeMo AutoModel's
    # PeftConfig the same names): the base weights are frozen (no gradient, no optimizer
    # state, no weight-gradient GEMM) and each target linear gets a rank-``lora_dim`` adapter
    # A (in -> dim), B (dim -> out) that trains (simulator/workload/lora.py).
    peft: Literal["none", "lora"] = "none"
    lora_dim: LoraRank = 32
    lora_dropout: Dropout = 0.0
    # None: the stack's default (stacks/*.yaml peft.lora_dropout_position: Megatron-Bridge
    # "pre", NeMo AutoModel "post"; simulator/shape/lora.py dropout_position)
    lora_dropout_position: Literal["pre", "post"] | None = None
    lora_target_modules: list[Literal["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]] \
        = Field(default_factory=lambda: ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"],
                min_length=1)
    # torchtitan's chunked loss (ChunkedLossWrapper num_chunks, torchtitan/components/loss.py):
    # the output layer and loss run on this many slices of the tokens, each slice's logits
    # freed by its own backward (simulator/memory/activations.py). 1: the whole logits.
    loss_num_chunks: PositiveInt = 1
    # Packed fine-tuning data (Megatron-Bridge dataset.packed_sequence_specs; NeMo / AutoModel
    # packed SFT): each seq_length sequence holds several documents and attention runs within
    # each (THD layout, cu_seqlens). The value is the documents' length-weighted mean length
    # in tokens, sum(L_i^2) / sum(L_i), which sets the attention FLOPs exactly
    # (simulator/workload/ops.py attention_core). None: attention spans the whole sequence.
    packed_document_length: DocTokens | None = None
    # The software stack whose kernels and overlaps the run uses: a shipped profile
    # stacks/<name>.yaml (simulator/config/stacks.py); megatron = Megatron-Core + TE.
    stack: str = "megatron"
    # The stack's release as published (e.g. "NeMo 24.03"): profiles may pick kernels by it.
    stack_release: str | None = None
    # The attention kernel the run configured where it is not the stack's default (e.g. a
    # Hugging Face attn_implementation "sdpa" = FlashAttention-2): te, fa2, fa3, cudnn or
    # triton (FlashAttention in Triton, llm-foundry's attn_impl: triton; A100 only);
    # None: the stack's (simulator/config/stacks.py run_stack).
    attention_family: Literal["te", "fa2", "fa3", "cudnn", "triton"] | None = None
    # torch.compile on (true): elementwise ops fused, the profile's eager byte factors not
    # applied; None / false: the profile as stated.
    torch_compile: bool | None = None
    # The run's own values of its stack profile where they differ from the profile and
    # its release ("section.key" -> value, e.g. {"fsdp.reshard_after_forward": false}):
    # what a recipe configured (simulator/config/stacks.py run_stack). Empty: the profile.
    stack_settings: dict[str, Any] = Field(default_factory=dict)

    @check
    def _check(self) -> None:
        self._check_recompute()
        low = {f: getattr(self, f) for f in ("main_params_dtype", "exp_avg_dtype",
                                             "exp_avg_sq_dtype") if getattr(self, f) != "fp32"}
        if self.main_grads_dtype == "bf16":
            low["main_grads_dtype"] = "bf16"
        if low and not self.use_precision_aware_optimizer:
            name, value = next(iter(low.items()))
            raise ConfigError(f"training.{name}", value,
                              "needs training.use_precision_aware_optimizer: true "
                              "(Megatron-Core's rule)")
        if self.main_grads_dtype == "bf16" and self.grad_reduce_in_fp32:
            raise ConfigError("training.main_grads_dtype", "bf16",
                              "needs grad_reduce_in_fp32: false (Megatron: "
                              "--main-grads-dtype can only be fp32 with fp32 reduction)")
        if self.fp8_param_gather and self.precision != "fp8":
            raise ConfigError("training.fp8_param_gather", True, "needs precision: fp8")
        if self.fp4_param_gather and self.precision != "fp4":
            raise ConfigError("training.fp4_param_gather", True, "needs precision: fp4")
        # under fp4 the attention runs per-tensor FP8 (Transformer Engine's DPA recipe
        # override, NVTE_DPA_FP8_RECIPE=Float8CurrentScaling, as MLPerf v5.1's NVFP4 8B runs)
        if self.fp8_dot_product_attention and not self.precision_type.scaled:
            raise ConfigError("training.fp8_dot_product_attention", True,
                              "needs precision: fp8 or fp4")
        if self.first_last_layers_bf16 and not self.precision_type.scaled:
            raise ConfigError("training.first_last_layers_bf16", True,
                              "needs precision: fp8 or fp4 (the other layers' format)")
        if self.first_last_layers_bf16 and self.precision == "fp8" \
                and self.fp8_recipe == "delayed":
            raise ConfigError("training.first_last_layers_bf16", True,
                              "is not supported with fp8_recipe delayed (Megatron-Core "
                              "fp8_utils.py: per-layer FP8 contexts break the delayed "
                              "amax reduction); use tensorwise, mxfp8 or blockwise")
        if self.first_last_layers_bf16 and self.stack != "megatron":
            raise ConfigError("training.first_last_layers_bf16", True,
                              "is a Megatron-Core option (training.stack: megatron)")
        if self.precision == "fp4" and self.stack != "megatron":
            raise ConfigError("training.precision", "fp4",
                              f"is priced as Megatron-Core + Transformer Engine run NVFP4 "
                              f"(training.stack: megatron); stack {self.stack}'s FP4 path "
                              "has no profile")
        if self.cpu_offloading_num_layers and not self.cpu_offloading:
            raise ConfigError("training.cpu_offloading_num_layers",
                              self.cpu_offloading_num_layers, "needs cpu_offloading: true")
        if self.data_parallel_sharding_strategy is not None and not self.use_megatron_fsdp:
            raise ConfigError("training.data_parallel_sharding_strategy",
                              self.data_parallel_sharding_strategy,
                              "needs training.use_megatron_fsdp: true (Megatron-Core reads it "
                              "only under Megatron-FSDP; without it, distributed_optimizer "
                              "decides the sharding)")
        if self.ddp_bucket_size is not None and self.ddp_bucket_size < MIN_DDP_BUCKET:
            raise ConfigError("training.ddp_bucket_size", self.ddp_bucket_size,
                              f"at least {MIN_DDP_BUCKET:,} parameters: a smaller bucket "
                              "holds one whole weight tensor (Megatron-Core never splits "
                              "one), which the even bucket split does not model")
        if self.keep_fp8_transpose_cache and not self.use_megatron_fsdp:
            raise ConfigError("training.keep_fp8_transpose_cache", True,
                              "needs training.use_megatron_fsdp: true (a Megatron-FSDP "
                              "option; without it TE keeps its FP8 weight copies anyway)")
        if self.num_distributed_optimizer_instances > 1 and not self.optimizer_sharded:
            raise ConfigError("training.num_distributed_optimizer_instances",
                              self.num_distributed_optimizer_instances,
                              "needs a sharded optimizer (distributed_optimizer: true or "
                              "Megatron-FSDP; Megatron-Core: 'Partial DistOpt cannot be used "
                              "without DistOpt')")
        if self.outer_dp_sharding_strategy != "no_shard":
            if not self.use_megatron_fsdp or self.num_distributed_optimizer_instances < 2:
                raise ConfigError("training.outer_dp_sharding_strategy",
                                  self.outer_dp_sharding_strategy,
                                  "applies to Megatron-FSDP's HSDP only (use_megatron_fsdp: "
                                  "true and num_distributed_optimizer_instances >= 2)")
            if self.sharding != "optim_grads_params":
                raise ConfigError("training.outer_dp_sharding_strategy",
                                  self.outer_dp_sharding_strategy,
                                  "needs data_parallel_sharding_strategy: optim_grads_params "
                                  "(Megatron-FSDP's HFSDP rule)")
        if self.use_megatron_fsdp and self.use_precision_aware_optimizer:
            from .stacks import run_stack  # lazy: stacks -> loader -> this module
            if run_stack(self).fsdp_impl == "megatron_fsdp":
                raise ConfigError("training.use_precision_aware_optimizer", True,
                                  "cannot be combined with use_megatron_fsdp (Megatron-Bridge "
                                  "turns it off under Megatron-FSDP); another stack's FSDP "
                                  "(training.stack) may keep low-precision states")

    def _check_recompute(self) -> None:
        g = self.recompute_granularity
        if g is not None and self.recompute != "none" and self.recompute != g:
            raise ConfigError("training.recompute", self.recompute,
                              f"contradicts recompute_granularity ({g}); set one of them")
        effective = g or self.recompute
        if effective != "full" and (self.recompute_method or self.recompute_num_layers):
            raise ConfigError("training.recompute_method", self.recompute_method,
                              "applies to full recompute only (recompute_granularity: full)")
        if self.recompute_modules is not None:
            if effective != "selective":
                raise ConfigError("training.recompute_modules", list(self.recompute_modules),
                                  "applies to selective recompute only")
            bad = [m for m in self.recompute_modules if m not in MODULES]
            if bad:
                raise ConfigError("training.recompute_modules", bad[0],
                                  f"must be among {', '.join(MODULES)}")
            if "op_sac" in self.recompute_modules and len(self.recompute_modules) > 1:
                raise ConfigError("training.recompute_modules", list(self.recompute_modules),
                                  "op_sac (torchtitan's per-op policy) covers the whole "
                                  "block: list it alone")

    @property
    def scaled_params(self) -> bool:
        """Whether the weights are stored in the scaled format itself (``fp8_param_gather``
        or ``fp4_param_gather``): no 16-bit copy, gathered in that format."""
        return self.fp8_param_gather or self.fp4_param_gather

    @property
    def precision_type(self) -> Precision:
        """The training precision as a type (:mod:`simulator.precision`)."""
        return precision_of(self.precision)

    @property
    def recompute_plan(self) -> Recompute:
        """The effective recompute setting (:mod:`simulator.config.recompute`). Selective
        without ``recompute_modules`` recomputes what the stack's selective checkpointing
        does (its profile's ``recompute.selective_modules``: Megatron-Core's
        ``[core_attn]``, torchtitan's per-op policy ``[op_sac]``)."""
        modules = self.recompute_modules
        if modules is None and (self.recompute_granularity or self.recompute) == "selective":
            from .stacks import run_stack  # lazy: stacks -> loader -> this module
            modules = run_stack(self).selective_modules
        return resolve_recompute(self.recompute, self.recompute_granularity,
                                 self.recompute_method, self.recompute_num_layers,
                                 modules)

    @property
    def recompute_kind(self) -> str:
        """none | selective | full, whichever way it was spelled."""
        return self.recompute_plan.granularity

    @property
    def sharding(self) -> str:
        """The data-parallel sharding in force: Megatron-FSDP's strategy (its default
        ``optim_grads_params``), else ``optim`` with the distributed optimizer (ZeRO-1)
        or ``no_shard``."""
        if self.use_megatron_fsdp:
            return self.data_parallel_sharding_strategy or "optim_grads_params"
        return "optim" if self.distributed_optimizer else "no_shard"

    @property
    def optimizer_sharded(self) -> bool:
        """Optimizer state (main params, moments) sharded over the data x context ranks."""
        return self.sharding != "no_shard"

    @property
    def grads_sharded(self) -> bool:
        """Main gradients sharded too (ZeRO-2/3): reduce-scattered every micro-batch."""
        return self.sharding in ("optim_grads", "optim_grads_params")

    @property
    def params_sharded(self) -> bool:
        """Weights sharded too (ZeRO-3): all-gathered before every forward and backward."""
        return self.sharding == "optim_grads_params"

    @property
    def grads_in_fp32(self) -> bool:
        """Whether the main-grad buffer is fp32 (Megatron DDP: fp32 when gradients are
        reduced in fp32, else the param dtype; main_grads_dtype with the precision-aware
        optimizer)."""
        if self.main_grads_dtype is not None:
            return self.main_grads_dtype == "fp32"
        return self.grad_reduce_in_fp32


class Workload(Schema):
    """One training job: what runs, how it is split, how it is trained."""

    model: ModelConfig
    parallelism: ParallelConfig = ParallelConfig()
    training: TrainingConfig

    @check
    def _check(self) -> None:
        tr = self.training
        if tr.cpu_offloading and self.parallelism.pipeline > 1:
            raise ConfigError("training.cpu_offloading", True,
                              "needs parallelism.pipeline 1 (Megatron-Core: no CPU "
                              "offloading with pipeline parallelism)")
        if tr.cpu_offloading and tr.cpu_offloading_num_layers >= self.model.num_layers:
            raise ConfigError("training.cpu_offloading_num_layers",
                              tr.cpu_offloading_num_layers,
                              f"must be below model.num_layers ({self.model.num_layers})")

    @check
    def _check_optimizer_instances(self) -> None:
        k = self.training.num_distributed_optimizer_instances
        if k == 1:
            return
        par = self.parallelism
        dp_cp = par.data * par.context
        if dp_cp % k:
            raise ConfigError("training.num_distributed_optimizer_instances", k,
                              f"must divide parallelism.data x context ({dp_cp}; "
                              "Megatron-Core: the DP x CP ranks split into equal instances)")
        if self.model.moe is not None:
            # a plan whose EP x ETP does not divide DP x CP x TP is refused by
            # shape/params.py, with its own message
            edp = par.expert_dp
            if edp % k:
                raise ConfigError("training.num_distributed_optimizer_instances", k,
                                  f"must divide the expert-data-parallel size ({edp})")

    @check
    def _check_bf16_layers(self) -> None:
        tr, m = self.training, self.model
        if not tr.first_last_layers_bf16:
            return
        n = tr.num_layers_at_start_in_bf16 + tr.num_layers_at_end_in_bf16
        if n > m.num_layers:
            raise ConfigError("training.num_layers_at_end_in_bf16",
                              tr.num_layers_at_end_in_bf16,
                              f"with num_layers_at_start_in_bf16 "
                              f"({tr.num_layers_at_start_in_bf16}) at most model.num_layers "
                              f"({m.num_layers})")
        if m.moe is not None:
            raise ConfigError("training.first_last_layers_bf16", True,
                              "is modelled for dense models only (a 16-bit MoE layer's "
                              "experts and dispatch are not costed apart)")

    def bf16_layer(self, layer: int) -> bool:
        """Whether 0-based decoder ``layer`` runs in 16-bit under ``first_last_layers_bf16``
        (Megatron-Core get_fp8_context / get_fp4_context: ``layer_no <
        num_layers_at_start_in_bf16`` or ``>= num_layers - num_layers_at_end_in_bf16``)."""
        tr = self.training
        return tr.first_last_layers_bf16 and (
            layer < tr.num_layers_at_start_in_bf16
            or layer >= self.model.num_layers - tr.num_layers_at_end_in_bf16)

    @property
    def bf16_layers(self) -> int:
        """How many decoder layers run in 16-bit (:meth:`bf16_layer`)."""
        return sum(self.bf16_layer(i) for i in range(self.model.num_layers))

    def in_bf16(self) -> Workload:
        """The same run as its 16-bit layers see it: precision bf16, no scaled weights or
        attention (Megatron-Core builds and runs those layers outside the FP8 / FP4 context)."""
        tr = self.training.model_copy(update={
            "precision": "bf16", "fp8_param_gather": False, "fp4_param_gather": False,
            "fp8_dot_product_attention": False, "first_last_layers_bf16": False})
        return self.model_copy(update={"training": tr})

    @check
    def _check_moe_plan(self) -> None:
        moe = self.model.moe
        if moe is not None and moe.token_dispatcher_type == "flex" and self.parallelism.expert < 2:
            field = "model.moe.enable_deepep" if moe.enable_deepep \
                else "model.moe.token_dispatcher_type"
            raise ConfigError(field, getattr(moe, field.rsplit(".", 1)[1]),
                              "the flex (DeepEP) dispatcher needs parallelism.expert >= 2")

    @property
    def num_microbatches(self) -> int:
        p = self.parallelism
        return self.training.global_batch_size // (self.training.micro_batch_size * p.data)
