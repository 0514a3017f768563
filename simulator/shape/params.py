"""Parameter counts held by one GPU of a pipeline stage (counts, not bytes).

Per decoder layer, per tensor-parallel rank (Megatron-LM sharding, biases
neglected):

* attention: QKV ``h*(a + 2g)*d / t`` (GQA) and output projection ``a*d*h / t``;
* dense MLP: ``(3 if gated else 2) * h * ffn / t`` (SwiGLU has three matrices);
* two norms ``2*2*h`` (LayerNorm weight and bias), replicated over TP;
* MoE layer instead of the dense MLP: router ``h*E`` (replicated), shared
  expert like a dense MLP, and ``E/EP`` routed experts per rank, each sharded
  over ETP: ``(E/EP) * (3|2) * h * f_e / etp``. Routed-expert parameters are
  "expert" parameters (their optimizer is sharded over expert-DP).

Embedding ``V_pad*h/t`` on the first stage (vocab padded to a multiple of
``128*t``, as Megatron's ``--make-vocab-size-divisible-by 128``); output layer
``V_pad*h/t`` plus the final norm on the last stage when the embeddings are
untied, or tied with PP > 1 (the last stage keeps its own copy of the word
embedding). With tied embeddings and PP = 1 the one copy serves both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.workload import Workload
from ..errors import ConfigError
from ..moe import is_moe_layer
from .lora import adapter_params_per_layer
from .mla import attention_params as mla_attention_params
from .partition import Partition


@dataclass(frozen=True)
class StageParams:
    """Parameters on one GPU of a stage: ``dense`` (sharded over DP*CP by the distributed
    optimizer) and ``expert`` (routed experts, sharded over expert-DP)."""

    dense: float
    expert: float
    # of ``dense``, the frozen parameters (LoRA's base weights): held, never trained
    frozen: float = 0.0
    # of ``expert``, the frozen ones (LoRA on a MoE model freezes its experts)
    frozen_expert: float = 0.0

    @property
    def total(self) -> float:
        return self.dense + self.expert

    @property
    def trainable(self) -> StageParams:
        """The parameters that get gradients and optimizer states (all but the frozen)."""
        if not self.frozen and not self.frozen_expert:
            return self
        return StageParams(dense=self.dense - self.frozen,
                           expert=self.expert - self.frozen_expert)

    @property
    def frozen_part(self) -> StageParams:
        """The frozen parameters alone (LoRA's base weights; none in full training)."""
        return StageParams(dense=self.frozen, expert=self.frozen_expert)


def _mlp_params(w: Workload, ffn: int) -> float:
    return (3 if w.model.gated_linear_unit else 2) * w.model.hidden_size * ffn


def layer_params(w: Workload, moe_layer: bool) -> StageParams:
    """(dense, expert) parameter counts of one decoder layer on one GPU."""
    m, par = w.model, w.parallelism
    h, t, d = m.hidden_size, par.tensor, m.head_dim
    attention = (h * (m.num_attention_heads + 2 * m.groups) * d
                 + m.num_attention_heads * d * h) / t
    if m.multi_latent_attention:
        attention = mla_attention_params(m, t)
    norms = 4.0 * h
    if not (moe_layer and m.moe is not None):
        return StageParams(dense=attention + norms + _mlp_params(w, m.ffn) / t, expert=0.0)
    moe = m.moe
    router = float(h * moe.num_experts)
    shared = _mlp_params(w, moe.shared_expert_ffn_hidden_size) / t
    experts = moe.num_experts / par.expert * _mlp_params(w, moe.ffn_hidden_size or m.ffn) / par.etp
    return StageParams(dense=attention + norms + router + shared, expert=experts)


def mtp_params(w: Workload) -> StageParams:
    """``mtp_num_layers`` multi-token-prediction modules on one GPU of the stage that runs
    them (the last, or a layout's standalone MTP stage).

    Each (DeepSeek-V3 sec. 2.2; Megatron-Core ``MultiTokenPredictionLayer``): two
    RMSNorms (``2h``), the projection of the concatenated ``[h; h]`` to ``h``
    (``2h*h``, column-parallel) and one decoder layer of the model's last-layer kind
    (MoE for DeepSeek-V3); embedding and output head are shared with the main model.
    """
    k = w.model.mtp_num_layers
    if not k:
        return StageParams(dense=0.0, expert=0.0)
    h = w.model.hidden_size
    moe = w.model.moe
    lp = layer_params(w, moe is not None and is_moe_layer(moe, w.model.num_layers - 1))
    return StageParams(dense=k * (lp.dense + 2.0 * h + 2.0 * h * h / w.parallelism.tensor),
                       expert=k * lp.expert)


def padded_vocab(w: Workload) -> int:
    """Vocabulary padded to a multiple of ``128 * t`` (Megatron-LM default)."""
    unit = 128 * w.parallelism.tensor
    return -(-w.model.vocab_size // unit) * unit


def stage_layer_indices(partition: Partition, stage: int) -> list[int]:
    """Global 0-based decoder-layer indices on ``stage`` (the schedule's placement)."""
    return partition.stage_layer_ids(stage)


def stage_params(w: Workload, partition: Partition, stage: int) -> StageParams:
    """Parameters held by one GPU of ``stage``: its layers plus embedding / output layer.

    The embedding sits with global chunk 0, the output layer and final norm with
    the last global chunk, wherever the schedule places them (DualPipe holds
    both ends twice).
    """
    dense = expert = 0.0
    if w.model.moe is None:  # every layer alike: no layer ids needed (same sums, in order)
        lp = layer_params(w, False)
        for _ in range(partition.stage_layers(stage)):
            dense += lp.dense
            expert += lp.expert
        return _with_tables(w, partition, stage, dense, expert)
    cache: dict[bool, StageParams] = {}
    for layer in stage_layer_indices(partition, stage):
        routed = w.model.moe is not None and is_moe_layer(w.model.moe, layer)
        lp = cache.get(routed)
        if lp is None:  # one costing per kind of layer (setdefault would cost every layer)
            lp = cache[routed] = layer_params(w, routed)
        dense += lp.dense
        expert += lp.expert
    return _with_tables(w, partition, stage, dense, expert)


def stage_tables(w: Workload, partition: Partition, stage: int,
                 output: bool = True) -> list[float]:
    """Parameters on one GPU of each embedding / output table ``stage`` holds, ``V_pad*h/t``
    each: the embedding with global chunk 0, the output layer with the last one when the
    embeddings are untied or PP > 1 (module docstring); ``output`` False: the embedding's
    alone."""
    table = padded_vocab(w) * w.model.hidden_size / w.parallelism.tensor
    last_g = len(partition.counts) - 1
    own_output = output and (w.model.untie_embeddings_and_output_weights
                             or partition.num_stages > 1)
    return [table for g in partition.place[stage]
            for holds in (g == 0, g == last_g and own_output) if holds]


def _with_tables(w: Workload, partition: Partition, stage: int, dense: float,
                 expert: float) -> StageParams:
    """Add the embedding / output tables and the final norm where ``stage`` holds them."""
    dense += sum(stage_tables(w, partition, stage))
    last_g = len(partition.counts) - 1
    mtp_g = last_g if partition.mtp_chunk is None else partition.mtp_chunk
    for g in partition.place[stage]:
        if g == last_g:
            dense += w.model.hidden_size  # final norm
        if g == mtp_g:  # multi-token prediction: with the loss, or a stage of its own
            mtp = mtp_params(w)
            dense += mtp.dense
            expert += mtp.expert
    if w.training.peft == "lora":  # the base weights freeze; each layer's adapters train
        adapters = adapter_params_per_layer(w) * partition.stage_layers(stage)
        return StageParams(dense=dense + adapters, expert=expert, frozen=dense,
                           frozen_expert=expert)
    return StageParams(dense=dense, expert=expert)


def expert_data_parallel(w: Workload) -> int:
    """Expert-DP size ``(DP*CP*TP) / (EP*ETP)`` (Megatron-Core MoE parallel folding)."""
    par = w.parallelism
    outer = par.data * par.context * par.tensor
    inner = par.expert * par.etp
    if outer % inner:
        raise ConfigError("parallelism.expert", par.expert,
                          f"expert*expert_tensor ({inner}) must divide "
                          f"data*context*tensor ({outer})")
    moe = w.model.moe
    if moe is not None and moe.num_experts % par.expert:
        raise ConfigError("parallelism.expert", par.expert,
                          f"must divide model.moe.num_experts ({moe.num_experts})")
    return par.expert_dp
