"""Prices, deadline, budget and the cost-time frontier of a capacity table.

Cost (USD) = GPU-hours x the topology's price per GPU-hour, exactly; a topology without a
price has no cost (none is guessed). Where a price per fabric switch and per transceiver
is given, ``network_capex_usd`` = switches x price + transceivers x price (scale-out only;
the NVLink switches come with the nodes) and ``total_cost_usd`` adds it to the GPU cost;
otherwise ``total_cost_usd`` is the GPU cost.

Frontier rule: among the rows with a plan, a row is on the frontier when no other row is
at least as good in both expected days and cost and strictly better in one (Pareto,
minimising both). The cost axis is ``total_cost_usd`` when every such row has one, else
GPU-hours (the cost at any single price); ``frontier_axes`` in the table's ``attrs`` says
which. Rows without a plan are never on it. Ties (equal in both) are all on it. With a
model-size axis each model has its own frontier (a smaller model is not a cheaper way to
train a larger one).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError


def apply_prices(rows: list[dict[str, Any]], prices: dict[str, float],
                 switch_price: float | None = None,
                 transceiver_price: float | None = None) -> None:
    """Add ``price_per_gpu_hour``, ``cost_usd``, ``network_capex_usd``, ``total_cost_usd``."""
    for r in rows:
        price = prices.get(r["topology"])
        r["price_per_gpu_hour"] = price
        ok = r["status"] == "ok"
        r["cost_usd"] = r["gpu_hours"] * price if ok and price is not None else None
        capex = None
        if ok and switch_price is not None and transceiver_price is not None \
                and r.get("transceivers") is not None:
            switches = sum(v for k, v in r.items() if k.startswith("switches_L") and v)
            capex = switches * switch_price + r["transceivers"] * transceiver_price
        r["network_capex_usd"] = capex
        r["total_cost_usd"] = (None if r["cost_usd"] is None
                               else r["cost_usd"] + (capex or 0.0))


def mark_limits(rows: list[dict[str, Any]], deadline_days: float | None,
                budget_usd: float | None) -> None:
    """``meets_deadline`` (expected days <= deadline) and ``within_budget`` (total cost <=
    budget); ``None`` when no limit is given or the row has no plan."""
    for r in rows:
        ok = r["status"] == "ok"
        r["meets_deadline"] = (None if deadline_days is None or not ok
                               else bool(r["days"] <= deadline_days))
        r["within_budget"] = (None if budget_usd is None or not ok
                              or r["total_cost_usd"] is None
                              else bool(r["total_cost_usd"] <= budget_usd))


def frontier_axis(rows: list[dict[str, Any]]) -> str:
    """``total_cost_usd`` when every row with a plan has a cost, else ``gpu_hours``."""
    ok = [r for r in rows if r["status"] == "ok"]
    return "total_cost_usd" if ok and all(r["total_cost_usd"] is not None for r in ok) \
        else "gpu_hours"


def mark_frontier(rows: list[dict[str, Any]]) -> str:
    """Set ``on_frontier`` on every row (module docstring); returns the cost axis used."""
    axis = frontier_axis(rows)
    ok = [r for r in rows if r["status"] == "ok"]
    for r in rows:
        peers = [o for o in ok if o is not r and o.get("model") == r.get("model")]
        r["on_frontier"] = r["status"] == "ok" and not any(
            dominates((o["days"], o[axis]), (r["days"], r[axis])) for o in peers)
    return axis


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """``a`` is no worse than ``b`` in both and better in one (both minimised)."""
    return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])


def parse_prices(text: str | dict[str, float] | None, topologies: list[str]
                 ) -> dict[str, float]:
    """``"dgx-h100=2.5,gb200-nvl72=4.0"`` (or a dict) -> {topology: USD per GPU-hour};
    every key must be one of ``topologies``, every value a finite number >= 0."""
    if text is None:
        return {}
    pairs: list[tuple[str, Any]]
    if isinstance(text, dict):
        pairs = list(text.items())
    else:
        pairs = []
        for item in (x.strip() for x in text.split(",") if x.strip()):
            name, sep, value = item.partition("=")
            if not sep:
                raise ConfigError("--price", item, "TOPOLOGY=USD_PER_GPU_HOUR, e.g. "
                                  "dgx-h100=2.5")
            pairs.append((name.strip(), value.strip()))
    out = {}
    for name, value in pairs:
        if name not in topologies:
            raise ConfigError("--price", name, "a topology of --topology ("
                              + ", ".join(topologies) + ")")
        try:
            price = float(value)
        except (TypeError, ValueError):
            price = float("nan")
        if not (price >= 0 and price < float("inf")):
            raise ConfigError("--price", f"{name}={value}", "a finite USD per GPU-hour >= 0")
        out[name] = price
    return out
