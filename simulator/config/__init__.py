"""Parsing and validation of workload and topology documents.

The schema is a set of :class:`~simulator.config.schema.Schema` sections (declared like
pydantic models, validated by pydantic-core; see that module for why not ``BaseModel``).
"""

from __future__ import annotations

from .loader import apply_overrides, load_topology, load_workload, parse_override, parse_yaml
from .topology import GPUConfig, TierConfig, TopologyConfig
from .workload import ModelConfig, MoEConfig, ParallelConfig, TrainingConfig, Workload

__all__ = [
    "GPUConfig", "MoEConfig", "ModelConfig", "ParallelConfig", "TierConfig", "TopologyConfig",
    "TrainingConfig", "Workload", "apply_overrides", "load_topology", "load_workload",
    "parse_override", "parse_yaml",
]
