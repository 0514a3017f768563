"""Parsing and validation of workload and topology documents.

The schema is a set of pydantic models, built once when this package is imported. pydantic
asks its plugin loader for third-party plugins each time it builds a validator, and the
first ask scans the entry points of every installed distribution (importlib.metadata:
~25 ms of CPU with ~130 packages, more in a large environment; a tenth of the start-up
floor of a ``clustersim run``). These internal models need no plugin, so they are built
with ``PYDANTIC_DISABLE_PLUGINS`` set for the duration of the build only: the variable is
restored afterwards and a user's own models still get their plugins. A value the user set
(any, ``""`` included) is left as it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"


@contextmanager
def _without_pydantic_plugins() -> Iterator[None]:
    user_set = _PLUGINS in os.environ
    if not user_set:
        os.environ[_PLUGINS] = "__all__"
    try:
        yield
    finally:
        if not user_set:
            os.environ.pop(_PLUGINS, None)


with _without_pydantic_plugins():
    from .loader import apply_overrides, load_topology, load_workload, parse_override, parse_yaml
    from .topology import GPUConfig, TierConfig, TopologyConfig
    from .workload import ModelConfig, MoEConfig, ParallelConfig, TrainingConfig, Workload

__all__ = [
    "GPUConfig", "MoEConfig", "ModelConfig", "ParallelConfig", "TierConfig", "TopologyConfig",
    "TrainingConfig", "Workload", "apply_overrides", "load_topology", "load_workload",
    "parse_override", "parse_yaml",
]
