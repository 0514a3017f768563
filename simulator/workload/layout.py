"""Rank layout: where each parallel group's ranks sit in the topology.

Global ranks are numbered with the axes of ``parallelism.rank_order``
(default ``tp-cp-ep-dp-pp``, Megatron-Core's), the first varying fastest, so
TP peers are adjacent (inside an NVLink domain) and PP peers farthest apart.
Expert parallelism folds into the data/context ranks (Megatron-Core parallel
folding, Liu et al. 2025): the attention layout uses tp, cp, dp, pp; the
expert layout numbers the same ranks in the order of ``rank_order`` with tp read
as etp, dp as edp (cp folded into edp): with the default order (etp-ep-edp-pp) an EP group's
stride is ETP and its peers share NVLink domains; an order that puts dp before
ep (``tp-cp-dp-ep-pp``) spreads each EP group ``etp * edp`` ranks apart, across
nodes.
"""

from __future__ import annotations

from ..config.workload import Workload
from ..hardware import Placement, Topology


def strides(w: Workload) -> dict[str, int]:
    """Stride of each attention-layout axis in global rank order."""
    p = w.parallelism
    size = {"tp": p.tensor, "cp": p.context, "ep": 1, "dp": p.data, "pp": p.pipeline}
    out, acc = {}, 1
    for axis in p.rank_order.split("-"):
        out[axis] = acc
        acc *= size[axis]
    return out


def group_layout(w: Workload, topo: Topology) -> dict[str, Placement]:
    """Placement of every communication group one simulated rank takes part in.

    Keys: ``tp``, ``cp``, ``dp`` (data replicas), ``dp_cp`` (dense-gradient
    group: DP x CP ranks hold the same weights), ``pp`` (a neighbour pair),
    ``ep`` (expert all-to-all) and ``edp`` (expert-gradient group); with
    ``training.num_distributed_optimizer_instances`` = k, ``dp_cp_intra`` /
    ``edp_intra`` (the 1/k of those groups that one optimizer instance holds:
    consecutive ranks, Megatron-Core ``parallel_state`` slices the DP x CP rank list)
    and ``dp_cp_inter`` / ``edp_inter`` (the k ranks, one per instance, that hold the
    same shard). With k = 1 the intra groups are the whole groups and the inter
    groups single ranks.
    """
    p = w.parallelism
    st = strides(w)
    order = [a for a in p.rank_order.split("-") if a != "ep"]
    adjacent = abs(order.index("cp") - order.index("dp")) == 1
    dp_cp_stride = min(st["cp"], st["dp"]) if adjacent else st["dp"]
    etp = p.etp
    ep = p.expert
    edp = max(1, p.tensor * p.context * p.data // (ep * etp))
    est = expert_strides(w, edp)
    k = w.training.num_distributed_optimizer_instances
    dp_cp, dense_stride = p.data * p.context, dp_cp_stride if p.context > 1 else st["dp"]
    return {
        "tp": topo.place(p.tensor, st["tp"]),
        "cp": topo.place(p.context, st["cp"]),
        "dp": topo.place(p.data, st["dp"]),
        "dp_cp": topo.place(dp_cp, dense_stride),
        "pp": topo.place(min(2, p.pipeline), st["pp"]),
        "ep": topo.place(ep, est["ep"]),
        "edp": topo.place(edp, est["edp"]),
        "dp_cp_intra": topo.place(dp_cp // k, dense_stride),
        "dp_cp_inter": topo.place(k, dense_stride * (dp_cp // k)),
        "edp_intra": topo.place(max(1, edp // k), est["edp"]),
        "edp_inter": topo.place(k if edp >= k else 1, est["edp"] * max(1, edp // k)),
    }


def expert_strides(w: Workload, edp: int) -> dict[str, int]:
    """Strides of the expert layout's ep and edp axes: ``rank_order`` with tp read as
    etp and dp as edp, cp dropped (Megatron-Core's expert rank generator folds cp into
    expert-DP)."""
    p = w.parallelism
    size = {"etp": p.etp, "ep": p.expert, "edp": edp, "pp": p.pipeline}
    rename = {"tp": "etp", "dp": "edp", "ep": "ep", "pp": "pp"}  # cp folds into edp
    out, acc = {}, 1
    for axis in p.rank_order.split("-"):
        name = rename.get(axis)
        if name is None:
            continue
        out[name] = acc
        acc *= size[name]
    return out
