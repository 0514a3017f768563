"""Parsing and validation of workload and topology documents."""

from .loader import apply_overrides, load_topology, load_workload, parse_override, parse_yaml
from .topology import GPUConfig, TierConfig, TopologyConfig
from .workload import ModelConfig, MoEConfig, ParallelConfig, TrainingConfig, Workload

__all__ = [
    "GPUConfig", "MoEConfig", "ModelConfig", "ParallelConfig", "TierConfig", "TopologyConfig",
    "TrainingConfig", "Workload", "apply_overrides", "load_topology", "load_workload",
    "parse_override", "parse_yaml",
]
