"""Cross-field checks of a plan's fields against each other and the topology.

Single-field rules (positive sizes, known names) live in the pydantic schema;
the rules here relate fields to each other and to the cluster. Each raises a
:class:`ConfigError` naming the field, the value and what would be allowed.
They follow Megatron-LM / Megatron-Core's own argument checks, so a plan
accepted here would start there:

* the product ``tensor * pipeline * data * context`` fits the topology, and the
  TP group sits inside one scale-up (NVLink) domain: ``tensor`` divides its size;
* TP divides the attention heads, the KV groups (each rank holds whole KV heads;
  KV heads are never replicated across TP ranks), and the FFN widths;
* with sequence parallelism, TP also divides the per-CP-rank sequence;
* ``global_batch_size`` is a multiple of ``micro_batch_size * data``;
* pipeline: ``pipeline * virtual_pipeline <= num_layers``;
* context parallelism: the sequence splits into ``context`` (ring) or
  ``2 * context`` (zigzag, hybrid) equal chunks; Ulysses splits KV heads; it
  needs fused (flash) attention;
* experts: ``expert`` divides ``num_experts``, and ``expert * expert_tensor``
  divides ``tensor * context * data`` (Megatron-Core parallel folding,
  Liu et al. 2025); ``expert_tensor`` divides the expert FFN width;
* size: the engine replays every (stage, chunk, micro-batch) phase and every
  gradient bucket, so the number of phases (:data:`MAX_PHASES`) and the
  tokens per micro-batch are bounded.

Rules that need the plan's layout (the layer split, parameters per GPU, the
schedule's own rules) live in :mod:`simulator.shape.validate`, whose
``check_plan`` runs :func:`check_config` first: config knows nothing of
workload, so the dependency runs one way.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..precision import PRECISIONS
from .stacks import run_stack
from .topology import TopologyConfig
from .workload import MAX_TOKENS, Workload

MAX_PHASES = 250_000  # pipeline * virtual_pipeline * micro-batches: ~5 s of dense engine time


def _divides(field: str, value: int, target: int, what: str, why: str = "") -> None:
    if target % value:
        raise ConfigError(field, value, f"must divide {what} ({target}){why}")


def check_config(w: Workload, topo: TopologyConfig) -> None:
    """Raise ConfigError for the first field rule the plan breaks."""
    run_stack(w.training)  # training.stack names a shipped profile (one-line error)
    _check_size(w, topo)
    _check_tensor(w)
    _check_domain(w, topo)
    _check_batch(w)
    _check_pipeline(w)
    _check_context(w)
    _check_experts(w)
    _check_op_sac(w)
    _check_loss_chunks(w)
    _check_packed(w)
    _check_parallel_residual(w)


def _check_parallel_residual(w: Workload) -> None:
    """A parallel residual is costed for dense layers (simulator/workload/ops.py)."""
    if w.model.use_parallel_residual and w.model.moe is not None:
        raise ConfigError("model.use_parallel_residual", True,
                          "is costed for dense models only (a MoE layer's experts run after "
                          "its attention here); set it false or remove model.moe")


def op_sac_problem(w: Workload) -> str | None:
    """Why ``w``'s per-op SAC cannot be costed, or None (also None without it): torchtitan's
    policy is modelled for the Llama block it was written for (:mod:`simulator.shape.op_sac`),
    dense layers with standard attention."""
    if not w.training.recompute_plan.has("op_sac"):
        return None
    m = w.model
    if m.moe is not None or m.multi_latent_attention:
        return "MoE layers" if m.moe is not None else "multi-latent attention"
    return None


def _check_op_sac(w: Workload) -> None:
    what = op_sac_problem(w)
    if what is None:
        return
    if w.training.recompute_modules is None:  # the stack's selective policy
        raise ConfigError("training.recompute", "selective",
                          f"on stack {w.training.stack} selective is its per-op policy "
                          f"(recompute_modules [op_sac]), modelled for dense layers with "
                          f"standard attention, not {what}; use none or full, or name "
                          f"the modules in training.recompute_modules")
    raise ConfigError("training.recompute_modules", ["op_sac"],
                      f"torchtitan's per-op policy is modelled for dense layers with "
                      f"standard attention, not {what}; use selective modules or full")


def _check_loss_chunks(w: Workload) -> None:
    """torchtitan's chunked loss splits a rank's tokens of a micro-batch into equal slices
    (``ChunkedLossWrapper``: "sequence length must be divisible by num_chunks")."""
    n = w.training.loss_num_chunks
    tokens = w.training.micro_batch_size * w.model.seq_length // w.parallelism.context
    if n > 1 and tokens % n:
        raise ConfigError("training.loss_num_chunks", n,
                          f"must divide a rank's tokens per micro-batch (micro_batch_size x "
                          f"seq_length / context = {tokens}) into equal slices")


def _check_packed(w: Workload) -> None:
    """Packed documents (``training.packed_document_length``) fit in a sequence and run in
    a fused kernel with per-document boundaries (THD, cu_seqlens); under context
    parallelism each is split into ``2 x context`` chunks (Megatron-Core's THD split, the
    padding Megatron-Bridge's ``pad_seq_to_mult`` asks for)."""
    n = w.training.packed_document_length
    if n is None:
        return
    field = "training.packed_document_length"
    if n > w.model.seq_length:
        raise ConfigError(field, n, f"at most model.seq_length ({w.model.seq_length}): a "
                          f"document is packed whole into one sequence")
    if not (w.training.use_flash_attn or w.model.multi_latent_attention):
        raise ConfigError(field, n, "needs a fused attention kernel that takes the document "
                          "boundaries (THD, cu_seqlens): set training.use_flash_attn true")
    c = w.parallelism.context
    if c > 1 and n < 2 * c:
        raise ConfigError(field, n, f"at least 2 x context ({2 * c}) under context "
                          f"parallelism: each document is split into 2 x context chunks")


def _check_size(w: Workload, topo: TopologyConfig) -> None:
    n = w.parallelism.num_gpus
    if n > topo.max_gpus:
        raise ConfigError("parallelism", f"tensor*pipeline*data*context = {n}",
                          f"needs at most the topology's {topo.max_gpus} GPUs ({topo.name})")


def _check_domain(w: Workload, topo: TopologyConfig) -> None:
    p = w.parallelism
    domain = topo.tiers[0]
    if p.tensor > domain.size or domain.size % p.tensor:
        raise ConfigError("parallelism.tensor", p.tensor,
                          f"the TP group must sit inside one {domain.name} domain of "
                          f"{domain.size} GPUs: tensor must divide {domain.size}")
    prec = w.training.precision_type
    if getattr(topo.gpu.peak_tflops, prec.kernel, None) is None:
        have = [p.name for p in PRECISIONS.values()
                if getattr(topo.gpu.peak_tflops, p.kernel, None) is not None]
        raise ConfigError("training.precision", prec.name,
                          f"{topo.gpu.name} has no {prec.kernel} tensor cores "
                          f"(gpu.peak_tflops.{prec.kernel} is not set); use "
                          f"{' or '.join(have)}")


def _check_tensor(w: Workload) -> None:
    m, p = w.model, w.parallelism
    t = p.tensor
    _divides("parallelism.tensor", t, m.num_attention_heads, "model.num_attention_heads")
    _divides("parallelism.tensor", t, m.groups, "model.num_query_groups",
             ": each TP rank holds whole KV heads (they are not replicated)")
    _divides("parallelism.tensor", t, m.ffn, "model.ffn_hidden_size")
    if m.moe is not None and m.moe.shared_expert_ffn_hidden_size:
        _divides("parallelism.tensor", t, m.moe.shared_expert_ffn_hidden_size,
                 "model.moe.shared_expert_ffn_hidden_size")
    if p.sequence_parallel and t > 1 and m.seq_length % (t * p.context):
        raise ConfigError("model.seq_length", m.seq_length,
                          f"must be divisible by tensor * context ({t} * {p.context}) with "
                          "sequence_parallel: each TP rank holds an equal sequence shard")


def _check_batch(w: Workload) -> None:
    m, p, tr = w.model, w.parallelism, w.training
    per = tr.micro_batch_size * p.data
    if tr.global_batch_size % per:
        raise ConfigError("training.global_batch_size", tr.global_batch_size,
                          f"must be divisible by micro_batch_size * data "
                          f"({tr.micro_batch_size} * {p.data} = {per})")
    tokens = tr.micro_batch_size * m.seq_length
    if tokens > MAX_TOKENS:
        raise ConfigError("training.micro_batch_size", tr.micro_batch_size,
                          f"micro_batch_size * seq_length ({tokens}) must be at most "
                          f"{MAX_TOKENS} tokens")
    phases = p.pipeline * p.vp * w.num_microbatches
    if phases > MAX_PHASES:
        raise ConfigError("training.global_batch_size", tr.global_batch_size,
                          f"gives pipeline * virtual_pipeline * micro-batches = {phases} "
                          f"phases per step; the engine replays at most {MAX_PHASES} "
                          "(raise micro_batch_size or data, or lower global_batch_size)")


def _check_pipeline(w: Workload) -> None:
    m, p = w.model, w.parallelism
    # with the embedding / loss counted as layers (or an explicit layout) a chunk may hold
    # no decoder layer; partition_layers checks those splits itself
    explicit = (p.account_for_embedding_in_pipeline_split or p.account_for_loss_in_pipeline_split
                or p.pipeline_model_parallel_layout is not None)
    if p.pipeline * p.vp > m.num_layers and not explicit:
        raise ConfigError("parallelism.pipeline", p.pipeline,
                          f"pipeline * virtual_pipeline ({p.pipeline} * {p.vp}) must not "
                          f"exceed num_layers ({m.num_layers})")


def _check_context(w: Workload) -> None:
    m, p = w.model, w.parallelism
    c = p.context
    if c == 1:
        return
    if not w.training.use_flash_attn:
        raise ConfigError("training.use_flash_attn", False,
                          f"context parallelism (context={c}) needs fused (flash) attention")
    chunks = 2 * c if p.context_parallel_algo in ("ring_zigzag", "hybrid") else c
    if m.seq_length % chunks:
        raise ConfigError("model.seq_length", m.seq_length,
                          f"must be divisible by {chunks} for context={c} with "
                          f"{p.context_parallel_algo}")
    if p.context_parallel_algo == "ulysses":
        heads = m.groups // p.tensor if m.groups >= p.tensor else 1
        if c > heads or heads % c:
            raise ConfigError("parallelism.context", c,
                              f"Ulysses splits KV heads: must divide the {heads} KV heads "
                              f"per TP rank (num_query_groups {m.groups} / tensor {p.tensor})")


def _check_experts(w: Workload) -> None:
    m, p = w.model, w.parallelism
    if m.moe is None:
        if p.expert > 1:
            raise ConfigError("parallelism.expert", p.expert, "needs model.moe (a MoE model)")
        return
    _divides("parallelism.expert", p.expert, m.moe.num_experts, "model.moe.num_experts")
    fold = p.tensor * p.context * p.data
    if fold % (p.expert * p.etp):
        raise ConfigError("parallelism.expert", p.expert,
                          f"expert * expert_tensor ({p.expert} * {p.etp}) must divide "
                          f"tensor * context * data ({fold})")
    _divides("parallelism.expert_tensor", p.etp, m.moe.ffn_hidden_size or m.ffn,
             "the expert FFN width (model.moe.ffn_hidden_size)")

