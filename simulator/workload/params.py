"""Parameter counts per GPU (elements), after tensor-parallel sharding.

Attention: QKV ``h * (a + 2g) * d`` (GQA shares K/V over ``a/g`` heads) and
output projection ``a * d * h``; MLP ``h * ffn`` per matrix, two matrices or
three with a gated linear unit (Shazeer 2020, SwiGLU); two layer norms of
``h`` (replicated over TP). Embedding ``V * h``, sharded over TP by vocabulary
(Megatron's VocabParallelEmbedding).
"""

from __future__ import annotations

from ..config.workload import Workload


def attention_params(w: Workload) -> float:
    m, t = w.model, w.parallelism.tensor
    d = m.head_dim
    return (m.hidden_size * (m.num_attention_heads + 2 * m.groups) * d
            + m.num_attention_heads * d * m.hidden_size) / t + 2 * m.hidden_size


def mlp_params(w: Workload, ffn: int | None = None) -> float:
    m, t = w.model, w.parallelism.tensor
    mats = 3 if m.gated_linear_unit else 2
    return mats * m.hidden_size * (ffn or m.ffn) / t


def dense_layer_params(w: Workload) -> float:
    """Parameters of one dense decoder layer on one TP rank."""
    return attention_params(w) + mlp_params(w)


def embedding_params(w: Workload) -> float:
    return w.model.vocab_size * w.model.hidden_size / w.parallelism.tensor


def total_params(w: Workload) -> float:
    """Whole-model parameter count (all ranks, unsharded), dense layers only."""
    t = w.parallelism.tensor
    emb = w.model.vocab_size * w.model.hidden_size
    out = emb if w.model.untie_embeddings_and_output_weights else 0
    return dense_layer_params(w) * t * w.model.num_layers + emb + out
