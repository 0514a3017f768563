"""Cross-field checks of a plan against its model and topology.

Each rule raises a :class:`ConfigError` naming the field, the value and what
would be allowed. Rules follow Megatron-LM / Megatron-Core's own argument
checks, so a plan accepted here would start there.
"""

from __future__ import annotations

from ..errors import ConfigError
from .topology import TopologyConfig
from .workload import Workload


def _divides(field: str, value: int, target: int, what: str) -> None:
    if target % value:
        raise ConfigError(field, value, f"must divide {what} ({target})")


def check_plan(w: Workload, topo: TopologyConfig) -> None:
    """Raise ConfigError for the first rule the plan breaks."""
    m, p, tr = w.model, w.parallelism, w.training
    n = p.num_gpus
    if n > topo.max_gpus:
        raise ConfigError("parallelism", f"tp*pp*dp*cp = {n}",
                          f"needs at most the topology's {topo.max_gpus} GPUs ({topo.name})")
    scale_up = topo.tiers[0].size
    if p.tensor > scale_up:
        raise ConfigError("parallelism.tensor", p.tensor,
                          f"the TP group must sit inside one {topo.tiers[0].name} domain "
                          f"of {scale_up} GPUs")
    _divides("parallelism.tensor", p.tensor, m.num_attention_heads, "model.num_attention_heads")
    _divides("parallelism.tensor", p.tensor, m.groups, "model.num_query_groups")
    _divides("parallelism.tensor", p.tensor, m.ffn, "model.ffn_hidden_size")
    per = tr.micro_batch_size * p.data
    if tr.global_batch_size % per:
        raise ConfigError("training.global_batch_size", tr.global_batch_size,
                          f"must be divisible by micro_batch_size * data "
                          f"({tr.micro_batch_size} * {p.data} = {per})")
    if p.pipeline_schedule == "interleaved" and w.num_microbatches % p.pipeline:
        raise ConfigError("training.global_batch_size", tr.global_batch_size,
                          f"interleaved schedule needs the micro-batch count "
                          f"({w.num_microbatches}) to be a multiple of pipeline ({p.pipeline})")
    if p.pipeline * p.vp > m.num_layers:
        raise ConfigError("parallelism.pipeline", p.pipeline,
                          f"pipeline * virtual_pipeline must not exceed num_layers "
                          f"({m.num_layers})")
    _check_context(w)
    _check_experts(w)


def _check_context(w: Workload) -> None:
    m, p = w.model, w.parallelism
    c = p.context
    if c == 1:
        return
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
