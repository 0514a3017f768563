"""All-to-all volumes of expert parallelism (dispatch; combine is the mirror).

Experts sit contiguously on the ``ep`` ranks of an expert-parallel group,
``num_experts / ep`` each. In every MoE layer each rank routes its own
``tokens_per_rank`` tokens, sends every kept assignment (token, expert) to the
rank that holds the expert (*dispatch*), and gets the expert outputs back by
the reverse exchange (*combine*, same matrix transposed). One assignment
carries ``bytes_per_token = hidden_size * bytes_per_element`` bytes. Traffic a
rank sends to itself never touches a link and is excluded.

Flat model (``ranks_per_node=None``), as Megatron-Core's all-to-all dispatcher
moves data: one message per assignment. All source ranks follow the same
routing distribution (``loads``), so rank ``s`` sends ``A * share_r`` to rank
``r`` with ``A = tokens_per_rank * top_k * kept/total * bytes_per_token`` and
``share_r`` the fraction of kept load on rank ``r``. For uniform loads every
rank sends and receives ``(ep - 1) / ep`` of its ``A``.

Hierarchical model (``ranks_per_node`` given), as DeepSeek-V3 dispatches
(DeepSeek-AI 2024, sec. 3.2): intra-node assignments go over NVLink one per
assignment; a token crosses the inter-node network once per distinct remote
node it needs, and is forwarded inside that node. If a token's ``k`` picks are
independent with node shares ``q_n``, node ``n`` is hit with probability
``h_n = 1 - (1 - q_n) ** k``. Node-limited routing (``max_nodes_per_token =
M``) confines each token to at most ``M`` nodes: the expected hits are scaled
by ``min(1, M / sum(h))``. Both steps only lower inter-node bytes
(``h_n <= k * q_n``). Forwarding inside the destination node is not counted.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .router import RouterLoads


def rank_shares(loads: RouterLoads, ep: int) -> tuple[np.ndarray, float]:
    per_rank = loads.per_rank(ep).astype(float)
    kept = per_rank.sum()
    share = per_rank / kept if kept else per_rank
    kept_frac = kept / loads.total_assignments if loads.total_assignments else 0.0
    return share, kept_frac


def alltoall_matrix(loads: RouterLoads, ep: int, tokens_per_rank: int,
                    bytes_per_token: float) -> np.ndarray:
    """Flat dispatch bytes ``[src, dst]`` (zero diagonal); combine is its transpose."""
    share, kept_frac = rank_shares(loads, ep)
    per_src = tokens_per_rank * loads.topk * kept_frac * bytes_per_token
    mat = np.broadcast_to(per_src * share, (ep, ep)).copy()
    np.fill_diagonal(mat, 0.0)
    return mat


def _node_hits(loads: RouterLoads, ep: int, ranks_per_node: int,
               max_nodes_per_token: int | None) -> np.ndarray:
    """Expected distinct nodes hit per token, per node ``[nodes]`` (see module docs)."""
    if ranks_per_node < 1 or ep % ranks_per_node:
        raise ConfigError("ranks_per_node", ranks_per_node,
                          f"must divide the expert-parallel size ({ep})")
    share, _ = rank_shares(loads, ep)
    q = share.reshape(-1, ranks_per_node).sum(axis=1)
    hits = 1.0 - (1.0 - q) ** loads.topk
    if max_nodes_per_token is not None and hits.sum() > max_nodes_per_token:
        hits *= max_nodes_per_token / hits.sum()
    return hits


def internode_bytes(loads: RouterLoads, ep: int, tokens_per_rank: int,
                    bytes_per_token: float, ranks_per_node: int,
                    max_nodes_per_token: int | None = None) -> np.ndarray:
    """Inter-node dispatch bytes sent by each rank ``[ep]``, deduplicated per node."""
    hits = _node_hits(loads, ep, ranks_per_node, max_nodes_per_token)
    _, kept_frac = rank_shares(loads, ep)
    node_of = np.arange(ep) // ranks_per_node
    remote = hits.sum() - hits[node_of]
    return tokens_per_rank * kept_frac * bytes_per_token * remote


def alltoall_bytes(loads: RouterLoads, ep: int, tokens_per_rank: int, bytes_per_token: float,
                   ranks_per_node: int | None = None,
                   max_nodes_per_token: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(send_bytes[ep], recv_bytes[ep])`` of one dispatch, self traffic excluded.

    Flat per-assignment model without ``ranks_per_node``; with it, the
    hierarchical model: NVLink bytes within the node plus deduplicated,
    optionally node-limited, inter-node bytes.
    """
    mat = alltoall_matrix(loads, ep, tokens_per_rank, bytes_per_token)
    if ranks_per_node is None:
        return mat.sum(axis=1), mat.sum(axis=0)
    node_of = np.arange(ep) // ranks_per_node
    same = node_of[:, None] == node_of[None, :]
    intra = np.where(same, mat, 0.0)
    send_inter = internode_bytes(loads, ep, tokens_per_rank, bytes_per_token, ranks_per_node,
                                 max_nodes_per_token)
    hits = _node_hits(loads, ep, ranks_per_node, max_nodes_per_token)
    _, kept_frac = rank_shares(loads, ep)
    senders = ep - ranks_per_node  # ranks on other nodes, each sending to this node
    recv_inter = (tokens_per_rank * kept_frac * bytes_per_token * senders
                  * hits[node_of] / ranks_per_node)
    return intra.sum(axis=1) + send_inter, intra.sum(axis=0) + recv_inter
