"""The routed load a dropless MoE plan must hold on its busiest expert-parallel rank.

With a capacity factor every expert's buffers are sized to capacity, so the
busiest rank holds at most ``capacity_factor`` times the uniform share of the
routed tokens. Without one (dropless) nothing caps the rank that holds the
popular experts: a skewed or recorded router sends it more than its share, and a
real dropless run runs out of memory there, not at the mean. The memory model
therefore sizes the routed activations and the all-to-all buffers of a dropless
plan at the busiest rank's load over the uniform share, taken at its
:data:`HOT_QUANTILE` (the 99th percentile) over :data:`HOT_DRAWS` router draws of
one micro-batch of the EP group (:func:`simulator.moe.batch.route_rows`, the same
router the step simulation draws from). The percentile is a property of the
router's distribution, not of one step's draws, so it is estimated from a fixed
stream (``rng_for(0, HOT_KEY)``): a plan's memory does not move with the seed. The
percentile is taken per draw and applied to every layer, as if each layer's hot
experts sat on the same rank: an upper bound on one layer's peak, which is what
an out-of-memory error reports. Uniform routing loads every rank equally (1.0).
Dimensionless (a ratio of token counts).
"""

from __future__ import annotations

import numpy as np

from ..config.workload import Workload
from ..moe import rng_for
from ..moe.batch import route_rows
from ..shape.plan_shape import routed_tokens

HOT_QUANTILE = 0.99  # percentile of the busiest rank's load over the router's draws
HOT_DRAWS = 256  # router draws the percentile is taken over
HOT_KEY = 17  # spawn key of this stream (any fixed integer not used elsewhere)


def hot_rank_load(w: Workload) -> float:
    """Busiest EP rank's routed tokens over the uniform share for a dropless plan at
    :data:`HOT_QUANTILE` (module docs); 1.0 without MoE, with a capacity factor (the
    caller uses the factor) or under uniform routing."""
    moe, p = w.model.moe, w.parallelism
    if moe is None or moe.capacity_factor is not None or moe.router_load == "uniform":
        return 1.0
    tokens = routed_tokens(w) * p.expert
    key = (moe.model_dump_json(), tokens, p.expert)
    if key not in _CACHE:
        if len(_CACHE) > 256:
            _CACHE.clear()
        rows = route_rows(moe, tokens, rng_for(0, HOT_KEY), HOT_DRAWS)
        ratio = rows.imbalance(p.expert)["rank_max_over_mean"]
        _CACHE[key] = max(1.0, float(np.quantile(ratio, HOT_QUANTILE)))
    return _CACHE[key]


_CACHE: dict[tuple, float] = {}  # sweeps re-ask for the same router shape
