"""Expert load: how many token-assignments each expert (and each EP rank) receives.

A mixture-of-experts layer is as slow as its busiest expert-parallel rank:
every rank waits in the combine all-to-all for the one that received the most
tokens. The left panel shows assignments per expert for one micro-batch of one
MoE layer, the dashed line the even share ``tokens * top_k / num_experts``,
the red line the capacity ``floor(c * tokens * top_k / num_experts)`` when a
capacity factor ``c`` is set (GShard; Switch Transformer); the part of a bar
above it is dropped (hatched). The right panel sums the kept assignments of
the ``E / ep`` experts each EP rank holds (placed contiguously), with the
max/mean ratio that sets the MoE layer's slowdown.

Loads for a workload are the draw the step-time model uses for that layer and
micro-batch (:mod:`simulator.workload.moe.draws`: uniform, skewed or recorded
router, seeded by ``training.seed``). The EP group routes the tokens of its
``ep`` ranks together: each sends ``T * etp / tp`` (``T = micro_batch_size * seq_length / cp``; with
ETP < TP the TP ranks split the tokens), so one micro-batch routes ``ep``
times that.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError
from ..moe import capacity
from ..shape.plan_shape import routed_tokens
from ..workload.moe.draws import draw_table, moe_layers
from .figures import COLORS, new_figure, wrap_title


def expert_load_figure(expert_tokens: Any, ep: int = 1, capacity: int | None = None,
                       title: str | None = None):
    """Bars of tokens per expert and per EP rank; returns the matplotlib figure."""
    counts = np.asarray(expert_tokens, dtype=float)
    if counts.ndim != 1 or counts.size == 0 or (counts < 0).any():
        raise ConfigError("expert_tokens", counts.shape, "need a 1-D array of counts >= 0")
    n = counts.size
    if ep < 1 or n % ep:
        raise ConfigError("parallelism.expert", ep, f"must divide the expert count ({n})")
    kept = counts if capacity is None else np.minimum(counts, capacity)
    dropped = counts - kept
    ranks = kept.reshape(ep, -1).sum(axis=1)
    width = 12.0 if ep > 1 else 8.0
    fig, axes = new_figure(width, 4.4, ncols=2 if ep > 1 else 1,
                           gridspec_kw={"width_ratios": [3, 1.3]} if ep > 1 else None)
    ax = axes[0] if ep > 1 else axes
    x = np.arange(n)
    ax.bar(x, kept, width=0.85, color=COLORS["ep"], label="kept")
    if dropped.any():
        ax.bar(x, dropped, bottom=kept, width=0.85, color="white", edgecolor=COLORS["pp"],
               hatch="////", linewidth=0.5, label=f"dropped ({dropped.sum():.0f})")
    mean = counts.sum() / n
    ax.axhline(mean, color="black", ls="--", lw=1, label=f"even share {mean:.0f}")
    if capacity is not None:
        ax.axhline(capacity, color=COLORS["pp"], lw=1.2, label=f"capacity {capacity}")
    ax.set_xlabel("expert")
    ax.set_ylabel("token assignments per expert")
    ax.set_xlim(-0.7, n - 0.3)
    ax.set_title(f"per expert: max/mean {counts.max() / mean:.2f}" if mean else "per expert",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper right", framealpha=0.8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if ep > 1:
        _rank_panel(axes[1], ranks)
    fig.suptitle(wrap_title(title or f"Expert load: {n} experts, EP{ep}", width), fontsize=10)
    return fig


def _rank_panel(ax: Any, ranks: np.ndarray) -> None:
    r = np.arange(ranks.size)
    mean = ranks.mean()
    ax.bar(r, ranks, width=0.8, color=COLORS["compute"])
    ax.axhline(mean, color="black", ls="--", lw=1)
    ax.set_xlabel("EP rank")
    ax.set_ylabel("kept token assignments per EP rank")
    ax.set_title(f"per EP rank: max/mean {ranks.max() / mean:.2f}" if mean else "per EP rank",
                 fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def expert_loads(w: Any, layer: int | None = None, microbatch: int = 0) -> dict[str, Any]:
    """Route one micro-batch of ``w``'s first (or ``layer``-th) MoE layer.

    Returns ``{"loads": RouterLoads, "tokens", "layer", "capacity", "ep"}``.
    """
    moe = w.model.moe
    if moe is None:
        raise ConfigError("model.moe", None,
                          f"workload '{w.model.name}' has no MoE block; expert-load needs one")
    layers = moe_layers(w)
    if not layers:
        raise ConfigError("model.moe.first_k_dense", moe.first_k_dense,
                          "leaves no MoE layer; expert-load needs one")
    if layer is None:
        layer = layers[0]
    elif layer not in layers:
        raise ConfigError("--layer", layer, f"is not an MoE layer; MoE layers: {layers[:8]}...")
    if not 0 <= microbatch < w.num_microbatches:
        raise ConfigError("--microbatch", microbatch,
                          f"must be a micro-batch of the step, 0 to {w.num_microbatches - 1}")
    par = w.parallelism
    tokens = routed_tokens(w) * par.expert
    table = draw_table(w, tokens, moe.router_load == "uniform")
    loads = table.rows.row(table.index(layer, microbatch))
    cap = capacity(moe.capacity_factor, tokens, moe.router_topk, moe.num_experts)
    return {"loads": loads, "tokens": tokens, "layer": layer, "capacity": cap,
            "ep": par.expert}


def expert_load_title(w: Any, info: dict[str, Any], microbatch: int = 0) -> str:
    moe = w.model.moe
    cap = "dropless" if moe.capacity_factor is None else f"capacity factor {moe.capacity_factor:g}"
    return (f"Expert load: {w.model.name}, MoE layer {info['layer']}, micro-batch "
            f"{microbatch} ({info['tokens']} tokens)\n{moe.num_experts} experts top-"
            f"{moe.router_topk}, EP{info['ep']}, router {moe.router_load} (skew "
            f"{moe.router_skew:g}), balancing {moe.balancing}, {cap}")


def expert_load_figure_for(w: Any, layer: int | None = None, microbatch: int = 0,
                           title: str | None = None):
    """Expert-load figure of a workload with ``model.moe`` (routes with simulator.moe)."""
    info = expert_loads(w, layer, microbatch)
    return expert_load_figure(info["loads"].expert_tokens, ep=info["ep"],
                              capacity=info["capacity"],
                              title=title or expert_load_title(w, info, microbatch))
