"""The cost-time frontier of a capacity table: days against cost, one marker per topology.

Every row with a plan is a point (expected days, cost in USD; GPU-hours when a topology has
no price), labelled with its GPU count; the frontier (:mod:`simulator.capacity.frontier`)
is drawn as a staircase through its rows; the deadline is a vertical line and the budget a
horizontal one. Rows without a plan are listed under the axes.
"""

from __future__ import annotations

from typing import Any

from matplotlib.ticker import FuncFormatter

from .figures import new_figure, wrap_title

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def capacity_figure(df: Any, deadline_days: float | None = None,
                    budget_usd: float | None = None, title: str = ""):
    """Days (x) against cost (y) for every row of :func:`simulator.capacity`'s table."""
    axis = (df.attrs.get("frontier_axes") or ["days", "total_cost_usd"])[1]
    ok = df[df.status == "ok"]
    fig, ax = new_figure(7.5, 4.8)
    for i, (topo, rows) in enumerate(ok.groupby("topology", sort=False)):
        ax.scatter(rows.days, rows[axis], marker=MARKERS[i % len(MARKERS)], s=48,
                   label=topo, zorder=3)
        for _, r in rows.iterrows():
            ax.annotate(f"{int(r.num_gpus)}", (r.days, r[axis]), xytext=(4, 4),
                        textcoords="offset points", fontsize=8)
    front = ok[ok.on_frontier].sort_values("days")
    if len(front):
        ax.step(front.days, front[axis], where="post", color="black", lw=1.2,
                label="frontier", zorder=2)
    if deadline_days is not None:
        ax.axvline(deadline_days, color="#d62728", ls="--", lw=1, label="deadline")
    if budget_usd is not None and axis == "total_cost_usd":
        ax.axhline(budget_usd, color="#2ca02c", ls="--", lw=1, label="budget")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    money = FuncFormatter(lambda v, _: f"{v / 1e6:g}M" if v >= 1e6 else f"{v:,.0f}")
    for which in ("major", "minor"):
        getattr(ax.xaxis, f"set_{which}_formatter")(plain)
        getattr(ax.yaxis, f"set_{which}_formatter")(money)
    ax.set_xlabel("expected days to train (failures and checkpoints included)")
    ax.set_ylabel("cost (USD)" if axis == "total_cost_usd" else "GPU-hours (no price given)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    missing = df[df.status != "ok"]
    if len(missing):
        ax.text(0.0, -0.18, "no plan: " + ", ".join(
            f"{t} x {n}" for t, n in zip(missing.topology, missing.num_gpus, strict=True)),
            transform=ax.transAxes, fontsize=8)
    if title:
        ax.set_title(wrap_title(title, 7.5), fontsize=10)
    return fig


def frontier_table(df: Any) -> list[str]:
    """The frontier's rows as a Markdown table (fastest first)."""
    axis = (df.attrs.get("frontier_axes") or ["days", "total_cost_usd"])[1]
    front = df[(df.status == "ok") & df.on_frontier].sort_values("days")
    head = "cost (USD)" if axis == "total_cost_usd" else "GPU-hours"
    out = [f"| topology | GPUs | plan | step (s) | days (p10-p90) | {head} | MWh | goodput "
           "| network kW |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in front.to_dict("records"):
        kw = r.get("network_kW")
        out.append(f"| {r['topology']} | {r['num_gpus']} | {r['plan']} | "
                   f"{r['step_time_s']:.3f} | {r['days']:.1f} ({r['days_p10']:.1f}-"
                   f"{r['days_p90']:.1f}) | {r[axis]:,.0f} | {r['energy_MWh']:,.0f} | "
                   f"{r['goodput'] * 100:.1f}% | "
                   f"{'unknown' if kw is None or kw != kw else f'{kw:,.0f}'} |")
    return out
