"""One MoE block's routed-expert part: the record, and the views the plan reads of it.

An MoE layer costs its base ops (attention, shared expert: :mod:`.ops`) plus a
*part* (:class:`MoEPart`): the seconds its routed experts add on the critical EP rank
for one router draw (:mod:`.layer` computes them, numpy over the pool's draws).
The fields, in seconds:

* ``duration``: what the part adds to the layer's phase; ``compute`` of it on the
  compute stream (router, permute, expert GEMMs);
* ``dispatch`` and ``combine``: the two all-to-all (or all-gather) exchanges, of
  which ``exposed_ep`` is on the critical path and ``hidden_ep`` =
  ``dispatch + combine - exposed_ep`` ran under compute (overlap);
* ``experts``, ``router``, ``permute``: the compute by kind;
* ``host_stall`` and ``host``: the compute stream's wait on a launch-bound host and
  the host's own launch time (:mod:`.host`).

A part enters a phase (:func:`moe_phase`) as dispatch, then the experts, then
combine on the timeline, its exposed EP counted on the ``ep`` axis; the
``ep_breakdown_s`` of a result sums parts in :data:`EP_KEYS` order
(:func:`add_ep_breakdown`). :data:`PART_FIELDS` is the order in which per-draw parts
are stacked (``[field, draw]``) for every micro-batch at once (:mod:`.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...moe import RouterLoads
from ..cost import Phase, TimedOp


@dataclass(frozen=True, eq=False)  # holds RouterLoads: no value equality or hash
class MoEPart:
    """Seconds of one MoE block on the critical EP rank (beyond the layer's base ops)."""

    duration: float
    compute: float
    exposed_ep: float
    dispatch: float
    combine: float
    experts: float
    loads: RouterLoads
    permute: float = 0.0
    router: float = 0.0
    hidden_ep: float = 0.0
    host_stall: float = 0.0
    host: float = 0.0


PART_FIELDS = ("duration", "compute", "exposed_ep", "dispatch", "combine", "experts", "permute",
               "router", "hidden_ep", "host_stall", "host")


def part_fields(size, duration, compute, exposed, dispatch, combine, experts, router,
                permute, stall, host) -> dict[str, np.ndarray]:
    """:class:`MoEPart` fields as arrays ``[size]`` (scalars broadcast)."""
    vals = {"duration": duration, "compute": compute, "exposed_ep": exposed,
            "dispatch": dispatch, "combine": combine, "experts": experts, "permute": permute,
            "router": router, "hidden_ep": np.maximum(0.0, dispatch + combine - exposed),
            "host_stall": stall, "host": host}
    return {k: np.broadcast_to(np.asarray(v, dtype=float), (size,)) for k, v in vals.items()}


def moe_phase(part: MoEPart, ops: bool) -> Phase:
    """One MoE part as a phase: its seconds, exposed EP, and (``ops``) a dispatch /
    experts / combine timeline."""
    ph = Phase(duration=part.duration, compute=part.compute,
               exposed={"tp": 0.0, "cp": 0.0, "ep": part.exposed_ep})
    if ops:
        ph.ops = [TimedOp("ep_dispatch", "ep", 0.0, part.dispatch, 0.0, 0.0),
                  TimedOp("experts", "compute", part.dispatch, part.experts, 0.0, 0.0),
                  TimedOp("ep_combine", "ep", part.dispatch + part.compute, part.combine,
                          0.0, 0.0)]
    return ph


EP_KEYS = ("dispatch", "combine", "permute", "router", "expert_gemm", "exposed", "hidden",
           "host_stall")


def ep_values(part: MoEPart) -> tuple:
    """A part's fields in :data:`EP_KEYS` order (floats, or arrays over micro-batches)."""
    return (part.dispatch, part.combine, part.permute, part.router, part.experts,
            part.exposed_ep, part.hidden_ep, part.host_stall)


def add_ep_breakdown(acc: dict[str, float], part: MoEPart, weight: float = 1.0) -> None:
    """Accumulate one MoE part into an ``ep_breakdown_s`` dict (seconds, :data:`EP_KEYS`)."""
    for k, v in zip(EP_KEYS, ep_values(part), strict=True):
        acc[k] = acc.get(k, 0.0) + v * weight
