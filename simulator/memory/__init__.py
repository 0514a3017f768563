"""Per-GPU memory model: parameters, gradients, optimizer, activations, buffers.

Entry point :func:`estimate_memory` returns a :class:`MemoryReport` with one
:class:`StageMemory` per pipeline stage (bytes). The six activation formulas of
Korthikanti et al. 2022 (Table 2) are exposed as pure functions; the general
model the simulator uses is :func:`activation_bytes_per_layer`.
"""

from ..shape.params import StageParams, layer_params, stage_params
from .activations import activation_bytes_per_layer, is_moe_layer, microbatches_in_flight
from .korthikanti import (
                          korthikanti_full_recompute,
                          korthikanti_no_parallel,
                          korthikanti_tp,
                          korthikanti_tp_selective,
                          korthikanti_tp_sp,
                          korthikanti_tp_sp_selective,
)
from .model import COMPONENTS, MemoryReport, StageMemory, comm_buffer_bytes, estimate_memory

__all__ = [
    "COMPONENTS", "MemoryReport", "StageMemory", "StageParams", "activation_bytes_per_layer",
    "comm_buffer_bytes", "estimate_memory", "is_moe_layer", "korthikanti_full_recompute",
    "korthikanti_no_parallel", "korthikanti_tp", "korthikanti_tp_selective", "korthikanti_tp_sp",
    "korthikanti_tp_sp_selective", "layer_params", "microbatches_in_flight", "stage_params",
]
