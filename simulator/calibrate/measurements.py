"""What the calibration reads: measured points, each with the file and line it came from.

Units are SI (bytes, seconds, FLOPs); each parser converts at its file's boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# attention kernels: FLOPs relative to the forward (FlashAttention-2 backward does 2.5x the
# forward's matmul work: five matmuls against two, Dao 2023); kernels launched per row
ATTENTION_PASSES = {"fwd": (1.0, 1), "bwd": (2.5, 1), "fwd_bwd": (3.5, 2)}


@dataclass(frozen=True)
class CollectivePoint:
    """One nccl-tests row: ``op`` over ``ranks`` GPUs (``local`` per node), out-of-place."""

    op: str  # simulator name: all_reduce, reduce_scatter, all_gather, all_to_all, send_recv
    nbytes: float  # nccl-tests size column (B)
    ranks: int
    local: int  # ranks per host
    seconds: float  # out-of-place time
    busbw_GBps: float
    where: str  # file:line


@dataclass(frozen=True)
class GemmPoint:
    """One GEMM timing: ``2 m n k`` FLOPs in ``dtype``, ``seconds`` per call."""

    m: float
    n: float
    k: float
    dtype: str
    seconds: float
    where: str


@dataclass(frozen=True)
class AttentionPoint:
    """One fused-attention timing (``kernel``: fwd, bwd or fwd_bwd), seconds per call."""

    batch: float
    heads: float
    seq: float
    head_dim: float
    causal: bool
    kernel: str
    seconds: float
    where: str

    @property
    def flops(self) -> float:
        """``4 b h s^2 d`` for the full square, half under the causal mask (Dao et al. 2022),
        times the pass factor of :data:`ATTENTION_PASSES`."""
        full = 4.0 * self.batch * self.heads * self.seq * self.seq * self.head_dim
        return full * (0.5 if self.causal else 1.0) * ATTENTION_PASSES[self.kernel][0]

    @property
    def kernels(self) -> int:
        return ATTENTION_PASSES[self.kernel][1]

    def seconds_on(self, gpu: Any) -> float:
        """Predicted seconds of this call on ``gpu``: the FLOPs at Transformer Engine's / cuDNN's
        kernel efficiency for this sequence, head dim and mask
        (:func:`simulator.compute.attention.kernel_efficiency`, as a training step costs it),
        plus the launch overhead of each pass after the first."""
        from ..compute import attention_time
        from ..compute.attention import kernel_efficiency
        eff = kernel_efficiency("te", gpu, self.seq, self.head_dim, self.causal)
        return attention_time(self.flops, gpu, eff) + (self.kernels - 1) * gpu.kernel_overhead_s


@dataclass(frozen=True)
class StepRun:
    """A measured step time of ``workload`` with dotted ``overrides`` on the base topology."""

    workload: str
    overrides: dict[str, Any]
    step_time_s: float
    where: str


@dataclass
class TraceProfile:
    """Kernel time per step of one traced GPU, by op kind (gemm, attention, comm, memory)."""

    where: str
    steps: int
    kind_s: dict[str, float]  # per step
    unmapped_s: dict[str, float]  # kernel name -> s per step, not mapped to a kind
    run: StepRun | None = None  # the run's config, when given beside the trace

    @property
    def total_s(self) -> float:
        return sum(self.kind_s.values()) + sum(self.unmapped_s.values())

    @property
    def mapped_fraction(self) -> float:
        total = self.total_s
        return sum(self.kind_s.values()) / total if total > 0 else 0.0


@dataclass
class Measurements:
    """Everything read from the ``--measurements`` files."""

    collectives: list[CollectivePoint] = field(default_factory=list)
    gemms: list[GemmPoint] = field(default_factory=list)
    attention: list[AttentionPoint] = field(default_factory=list)
    runs: list[StepRun] = field(default_factory=list)
    traces: list[TraceProfile] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def extend(self, other: Measurements) -> None:
        self.collectives += other.collectives
        self.gemms += other.gemms
        self.attention += other.attention
        self.runs += other.runs
        self.traces += other.traces
        self.files += other.files
