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

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..config import TopologyConfig, Workload
from ..errors import ConfigError
from ..metrics.result import flatten

PREFIX = "time_to_train."
_SAME_AS_ROW = ("workload", "topology", "num_gpus")


class Options(BaseModel):
    """The ``time_to_train`` block of a sweep (fewer Monte-Carlo draws than the CLI)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: float = Field(gt=0)
    price_per_gpu_hour: float | None = Field(None, ge=0)
    save_interval: int | None = Field(None, ge=1)
    async_save: bool = False
    mc_runs: int = Field(20, ge=1, le=100000)
    mc_steps: int = Field(8, ge=1, le=100000)

    @field_validator("tokens", "price_per_gpu_hour")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("must be finite")
        return v


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
