"""The capacity table as text: one line per (topology, GPU count), the frontier starred."""

from __future__ import annotations

from typing import Any


def _num(v: Any, fmt: str, unknown: str = "?") -> str:
    return unknown if v is None else format(v, fmt)


def _mark(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "NO")


def _switches(r: dict[str, Any]) -> str:
    if r.get("fabric_levels") is None:
        return "unknown"
    counts = [int(r[f"switches_L{j}"]) for j in range(1, int(r["fabric_levels"]) + 1)]
    return "/".join(map(str, counts)) or "0"


def format_table(rows: list[dict[str, Any]], attrs: dict[str, Any]) -> str:
    """Fixed-width text: plan, step (interval), days (p10-p90), GPU-hours, cost, MWh,
    goodput, free memory, limits, frontier and the fabric's switches / optics / kW."""
    head = (f"{'':1}{'model':<12} " if rows and "model" in rows[0] else " ") + (
            f"{'topology':<12} "
            f"{'GPUs':>6}  {'plan':<32} {'step s (80% interval)':<22} "
            f"{'days (p10-p90)':<20} {'GPU-h':>10} {'cost USD':>12} {'MWh':>8} "
            f"{'goodput':>7} {'free GB':>7} {'deadline':>8} {'budget':>6}  "
            f"{'switches':<12} {'optics':>7} {'net kW':>7}")
    lines = [head]
    for r in rows:
        model = f"{r['model']:<12} " if "model" in r else ""
        star = "*" if r.get("on_frontier") else " "
        if r["status"] != "ok":
            lines.append(f"{star}{model}{r['topology']:<12} {r['num_gpus']:>6}  "
                         f"no plan: {r['reason']}")
            continue
        step = (f"{r['step_time_s']:.3f} ({_num(r['step_time_low_s'], '.3f')}-"
                f"{_num(r['step_time_high_s'], '.3f')})")
        days = f"{r['days']:.1f} ({r['days_p10']:.1f}-{r['days_p90']:.1f})"
        cost = "n/a" if r["total_cost_usd"] is None else f"{r['total_cost_usd']:,.0f}"
        kw = _num(r.get("network_kW"), ".0f")
        lines.append(
            f"{star}{model}{r['topology']:<12} {r['num_gpus']:>6}  {r['plan']:<32} "
            f"{step:<22} {days:<20} {r['gpu_hours']:>10,.0f} {cost:>12} "
            f"{r['energy_MWh']:>8,.0f} {r['goodput'] * 100:>6.1f}% "
            f"{r['memory_headroom_GB']:>7.1f} {_mark(r['meets_deadline']):>8} "
            f"{_mark(r['within_budget']):>6}  {_switches(r):<12} "
            f"{_num(r.get('transceivers'), '.0f'):>7} {kw:>7}")
    axes = attrs.get("frontier_axes", ["days", "total_cost_usd"])
    lines += ["", f"* on the frontier: no other row is at least as good in {axes[0]} and "
              f"{axes[1]} and better in one"]
    return "\n".join(lines) + "\n"
