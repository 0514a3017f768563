"""Per-GPU memory of every pipeline stage, with a breakdown, and whether it fits.

Bytes per parameter (mixed-precision Adam, Rajbhandari et al. 2020 "ZeRO",
Section 3.1: 16 bytes/param = 2 fp16 weights + 2 fp16 grads + 12 optimizer).
We follow Megatron-LM instead for the gradients, which it accumulates in an
fp32 ``main_grad`` buffer (Megatron-LM distributed-optimizer docs: 18 bytes per
parameter without, ``6 + 12/d`` with the distributed optimizer):

* parameters: 2 bytes (bf16/fp16 weights); fp8 adds 1 byte for Transformer
  Engine's cached fp8 weight copy;
* gradients: 4 bytes (fp32 main grads; 2 with ``grad_reduce_in_fp32`` off), full
  size on every rank (the distributed optimizer is ZeRO-1: it shards optimizer
  state, not grads);
* optimizer: 12 bytes (fp32 master weights, Adam first and second moments),
  divided by DP*CP with ``distributed_optimizer`` (expert parameters: by
  expert-DP = DP*CP*TP/(EP*ETP)).

Activations come from :mod:`.activations`; communication buffers are the
explicit per-layer staging buffers named in :func:`comm_buffer_bytes`; NCCL's
own channel buffers, the CUDA context and allocator fragmentation are the
topology's ``gpu.framework_memory_bytes`` allowance.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.workload import Workload
from ..errors import ConfigError
from ..hardware import Topology
from ..workload.params import expert_data_parallel, stage_layer_indices, stage_params
from ..workload.partition import Partition, partition_layers
from .activations import (
    BYTES_16,
    activation_bytes_per_layer,
    embedding_activation_bytes,
    is_moe_layer,
    microbatches_in_flight,
    moe_load,
    output_activation_bytes,
)

GB = 1e9
PARAM_BYTES = 2.0  # bf16/fp16 weights
FP8_WEIGHT_CACHE_BYTES = 1.0  # Transformer Engine fp8 weight copy
GRAD_BYTES = 4.0  # fp32 main grads (Megatron-LM)
OPTIMIZER_BYTES = 12.0  # fp32 master + Adam m + v (ZeRO paper, K = 12)
COMPONENTS = ("parameters", "gradients", "optimizer", "activations", "comm_buffers",
              "framework")


@dataclass(frozen=True)
class StageMemory:
    """Memory of one GPU of pipeline stage ``stage``; every field in bytes."""

    stage: int
    parameters: float
    gradients: float
    optimizer: float
    activations: float
    comm_buffers: float
    framework: float

    @property
    def total(self) -> float:
        return sum(getattr(self, c) for c in COMPONENTS)

    def breakdown_GB(self) -> dict[str, float]:
        """Each component in decimal GB (1e9 bytes); the total is not included."""
        return {c: getattr(self, c) / GB for c in COMPONENTS}

    @property
    def biggest(self) -> str:
        return max(COMPONENTS, key=lambda c: getattr(self, c))


@dataclass(frozen=True)
class MemoryReport:
    """Every stage's memory against the GPU's capacity (bytes)."""

    stages: tuple[StageMemory, ...]
    capacity_bytes: float

    @property
    def worst(self) -> StageMemory:
        return max(self.stages, key=lambda st: st.total)  # first stage wins ties

    @property
    def fits(self) -> bool:
        return self.worst.total <= self.capacity_bytes

    @property
    def fits_in_memory(self) -> bool:
        return self.fits

    @property
    def memory_per_gpu_GB(self) -> float:
        """Worst stage's total, decimal GB."""
        return self.worst.total / GB

    @property
    def memory_breakdown_GB(self) -> dict[str, float]:
        return self.worst.breakdown_GB()

    def explain(self) -> str:
        """One sentence: worst stage, need vs capacity, margin, biggest component."""
        st = self.worst
        need, cap = st.total / GB, self.capacity_bytes / GB
        margin = (f"{need - cap:.1f} GB over" if not self.fits
                  else f"{cap - need:.1f} GB free")
        big = st.biggest
        return (f"stage {st.stage} needs {need:.1f} GB of {cap:.4g} GB ({margin}); "
                f"biggest: {big} {getattr(st, big) / GB:.1f} GB")


def comm_buffer_bytes(w: Workload, expert_load_factor: float = 1.0) -> float:
    """Explicit communication staging buffers on one GPU, bytes.

    * TP with SP: the all-gathered layer input and the reduce-scatter input,
      ``2 * 2*s*b*h`` (Korthikanti 2022 Section 4.2.2; Megatron's global buffer);
    * PP: send + recv of one boundary activation, ``2 * 2*s*b*h/t_sp``,
      doubled for the interleaved schedule (forward and backward overlap);
    * CP (ring attention): send + recv of K and V, ``2*2*2*s*b*g*d/t``;
    * EP: the all-to-all send buffer of this GPU's routed tokens.
    ``s`` is the local sequence (``seq_length/cp``).
    """
    m, par = w.model, w.parallelism
    s, b, h, t = m.seq_length / par.context, w.training.micro_batch_size, m.hidden_size, \
        par.tensor
    sp_div = t if par.sequence_parallel else 1
    total = 0.0
    if t > 1 and par.sequence_parallel:
        total += 2 * BYTES_16 * s * b * h
    if par.pipeline > 1:
        per = 2 * BYTES_16 * s * b * h / sp_div
        total += per * (2 if par.pipeline_schedule == "interleaved" else 1)
    if par.context > 1:
        total += 2 * 2 * BYTES_16 * s * b * m.groups * m.head_dim / t
    if par.expert > 1 and m.moe is not None:
        routed = s * b * m.moe.router_topk * moe_load(w, expert_load_factor) / t
        total += routed * BYTES_16 * h * par.etp
    return total


def _stage_activations(w: Workload, layers: list[int], stage: int, last: bool,
                       load: float) -> float:
    """Activations held by one GPU of ``stage`` at its peak, bytes."""
    cache: dict[tuple[bool, str | None], float] = {}

    def per_layer(layer: int, mode: str | None = None) -> float:
        key = (is_moe_layer(w, layer), mode)
        if key not in cache:
            cache[key] = activation_bytes_per_layer(w, key[0], load, mode)
        return cache[key]

    in_flight = microbatches_in_flight(w, stage)
    acts = in_flight * sum(per_layer(layer) for layer in layers)
    if w.training.recompute == "full" and layers:
        acts += max(per_layer(layer, "none") for layer in layers)  # recompute working set
    if stage == 0:
        acts += in_flight * embedding_activation_bytes(w)
    if last:
        gpipe = w.parallelism.pipeline_schedule == "gpipe"
        acts += (w.num_microbatches if gpipe else 1) * output_activation_bytes(w)
    return acts


def estimate_memory(w: Workload, topo: Topology, partition: Partition | None = None,
                    expert_load_factor: float = 1.0) -> MemoryReport:
    """Per-GPU memory of every pipeline stage of ``w`` on ``topo``'s GPU (bytes).

    ``expert_load_factor``: routed tokens on the busiest EP rank over the
    uniform share (>= 1 under skew); ignored when the model sets a capacity factor.
    """
    par, tr = w.parallelism, w.training
    if w.num_microbatches < 1:
        raise ConfigError("training.global_batch_size", tr.global_batch_size,
                          f"must be at least micro_batch_size*data "
                          f"({tr.micro_batch_size * par.data})")
    load = moe_load(w, expert_load_factor)
    partition = partition or partition_layers(w)
    dp_shard = par.data * par.context if tr.distributed_optimizer else 1
    edp = expert_data_parallel(w) if w.model.moe is not None else 1
    edp_shard = edp if tr.distributed_optimizer else 1
    weight_bytes = PARAM_BYTES + (FP8_WEIGHT_CACHE_BYTES if tr.precision == "fp8" else 0.0)
    comm = comm_buffer_bytes(w, expert_load_factor)
    stages = []
    for stage in range(partition.num_stages):
        sp = stage_params(w, partition, stage)
        layers = stage_layer_indices(partition, stage)
        last = stage == partition.num_stages - 1
        stages.append(StageMemory(
            stage=stage,
            parameters=weight_bytes * sp.total,
            gradients=(GRAD_BYTES if w.training.grad_reduce_in_fp32 else 2.0) * sp.total,
            optimizer=OPTIMIZER_BYTES * (sp.dense / dp_shard + sp.expert / edp_shard),
            activations=_stage_activations(w, layers, stage, last, load),
            comm_buffers=comm,
            framework=topo.gpu.framework_memory_bytes,
        ))
    return MemoryReport(stages=tuple(stages), capacity_bytes=topo.gpu.hbm_bytes)


__all__ = ["COMPONENTS", "MemoryReport", "StageMemory", "estimate_memory"]
