"""Per-draw MoE costs kept across the plans of one process (a search's shared prices).

Pricing a step's router draws (:meth:`.moe_layer.MoECost.cost_rows`: dispatch,
experts, combine, host stalls of every draw, numpy over the pool) is most of an MoE
plan's costing. A plan search builds thousands of plans that read the same shared,
read-only draw table (:func:`.moe_draws.draw_table`) and differ only in what these
costs do not read (VP, schedule, recompute), so the costs are kept in a *slot* per
(table, cost inputs): :func:`cost_slot` hands every such plan the same dict, and a
table is priced once per placement and layer shape, not once per plan.

The key holds the table by identity, so the slot also holds the table and the
topology themselves: their ids cannot be reused by other objects while the slot
lives. Slots are dropped least recently used past :data:`CACHE_BYTES`, one process's
share (a sweep worker keeps its own). A plan whose table is its own (writeable) keeps
its costs on itself instead. Keeping or dropping changes no number, only the time.
"""

from __future__ import annotations

from ...hardware import Topology
from ...moe.batch import LoadRows
from .draws import ByteLRU, clear_draw_tables

# a slot holds at most three [11, K] stacks and 3 x 11 fields of K draws, some broadcast:
# 8 bytes x 72 per draw bounds it
COST_BYTES_PER_DRAW = 8 * 72
CACHE_BYTES = 128 << 20
_COSTS = ByteLRU(CACHE_BYTES)


def cost_slot(rows: LoadRows, topo: Topology, cost_key: tuple) -> dict:
    """The dict in which every plan reading the shared draws ``rows`` with the same cost
    inputs ``cost_key`` (:meth:`.moe_layer.MoECost._cost_key`) keeps their costs."""
    key = (id(rows), *cost_key)
    hit = _COSTS.get(key)
    if hit is None:  # the slot holds the table and topology: their ids stay theirs
        hit = {"_held": (rows, topo)}
        _COSTS.put(key, hit, COST_BYTES_PER_DRAW * len(rows))
    return hit


def clear_moe_caches() -> None:
    """Forget every kept draw table and per-draw cost of this process, so that the next
    plan draws and prices afresh (benchmarks time a first simulation this way; the
    results are the same either way)."""
    _COSTS.clear()
    clear_draw_tables()
