"""Time-to-train as sweep outputs: days and dollars beside every swept configuration.

A sweep document (or :func:`simulator.sweep`) may carry a ``time_to_train`` block::

    time_to_train: {tokens: 15e12, price_per_gpu_hour: 2.0}   # + save_interval, async_save,
                                                              #   mc_runs, mc_steps

and every valid row then gains ``time_to_train.days``, ``time_to_train.cost_usd``,
``time_to_train.goodput``, ... (the flattened :class:`~simulator.reliability.run.TimeToTrain`),
so clusters and plans compare by days and dollars. Any axis can vary the inputs, e.g.
``topology.reliability.gpu_failures_per_gpu_day`` or ``topology.power.pue``.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import ValidationError

from ..config import TopologyConfig, Workload
from ..config.bounds import integer, real
from ..config.schema import Schema
from ..errors import ConfigError
from ..metrics.result import flatten

PREFIX = "time_to_train."
# already in the sweep row, from the same simulated step
_SAME_AS_ROW = ("workload", "topology", "num_gpus", "memory_per_gpu_GB", "fits_in_memory",
                "notes")


Positive = real(gt=0)  # finite: NaN and infinities are refused
Price = real(ge=0)
Interval = integer(ge=1)
Draws = integer(ge=1, le=100000)


class Options(Schema):
    """The ``time_to_train`` block of a sweep (fewer Monte-Carlo draws than the CLI)."""

    tokens: Positive
    price_per_gpu_hour: Price | None = None
    save_interval: Interval | None = None
    async_save: bool = False
    mc_runs: Draws = 20
    mc_steps: Draws = 8


def check_options(block: dict[str, Any] | None) -> dict[str, Any] | None:
    """The validated block as a plain dict, or None; raises ConfigError."""
    if block is None:
        return None
    try:
        return Options.model_validate(block).model_dump()
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"time_to_train.{loc}", err.get("input"), err["msg"].lower()) from None


def metrics(w: Workload, t: TopologyConfig, options: dict[str, Any]) -> dict[str, Any]:
    """Flattened time-to-train outputs of one configuration, keys prefixed ``time_to_train.``."""
    # The reliability models load here, for a sweep that asks for them: every sweep
    # imports this module (the options check), most never need them (start-up, issue 16).
    from .run import time_to_train_resolved

    r = time_to_train_resolved(w, t, options["tokens"], options["price_per_gpu_hour"],
                               options["save_interval"], options["async_save"],
                               options["mc_runs"], options["mc_steps"])
    d = {k: v for k, v in r.to_dict().items() if k not in _SAME_AS_ROW}
    return {PREFIX + k: v for k, v in flatten(d).items()}
