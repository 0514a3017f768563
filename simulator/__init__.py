"""clustersim: a discrete-event performance simulator for distributed LLM training.

``import simulator`` loads nothing but this file and :mod:`simulator.errors`: the public
functions load on first access (``from simulator import simulate`` loads numpy,
pydantic-core and pyyaml with the API), so ``clustersim --version`` imports no simulator
module and ``clustersim run`` starts close to the cost of importing those and simpy
(``benchmarks/bench_startup.py``); simpy itself loads when a replay needs the
event loop (traces, ``engine="simpy"``). The sweep machinery behind :func:`sweep`
and :func:`search` (process pools, a SQLite store, and pandas for the tables
they return) loads on their first use; matplotlib loads with the first figure;
the extras dask and pyarrow load only when asked for (:mod:`simulator.optional`).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from .errors import ConfigError
from .version import __version__

__all__ = ["ConfigError", "Result", "TimeToTrain", "__version__", "capacity", "plan", "search",
           "sensitivity", "simulate", "sweep", "time_to_train"]

# Public functions defined in the ``simulator.sweep`` subpackage, loaded on first access.
_LAZY = {"plan": "simulator.api", "simulate": "simulator.api", "Result": "simulator.metrics",
         "sweep": "simulator.sweep", "search": "simulator.sweep",
         "sensitivity": "simulator.sensitivity",
         "time_to_train": "simulator.reliability.run", "TimeToTrain": "simulator.reliability.run",
         "capacity": "simulator.capacity"}


class _Package(types.ModuleType):
    """This package's module type: ``simulator.sweep`` and ``simulator.search`` are the
    functions (as they always were), loaded on first access.

    The subpackage ``simulator.sweep`` has the same name as the function it defines.
    When any code imports the subpackage, the import system sets the attribute
    ``simulator.sweep`` to the module; ``__setattr__`` keeps the function instead
    (the subpackage stays reachable as ``sys.modules["simulator.sweep"]`` and by
    ``from simulator.sweep import ...``), exactly as the eager import used to.
    """

    def __getattr__(self, name: str) -> Any:
        if name not in _LAZY:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(_LAZY[name]), name)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return  # the import system registering the subpackage: keep the function
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *_LAZY})


sys.modules[__name__].__class__ = _Package
