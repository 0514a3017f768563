"""Topology schema: what the cluster *is* (hardware only).

Units are spelled in field names (``bandwidth_GBps``, ``latency_us``) and
converted to SI exactly once, in :mod:`simulator.hardware`. Every calibration
constant carries its source in the ``sources`` map of its block.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from ..errors import ConfigError

Strict = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class PeakTFLOPs(BaseModel):
    """Dense (no 2:4 sparsity) peak tensor-core throughput, TFLOP/s."""

    model_config = Strict
    bf16: PositiveFloat
    fp16: PositiveFloat | None = None  # default: bf16
    fp8: PositiveFloat | None = None  # None: no FP8 tensor cores
    fp32: PositiveFloat | None = None


class GPUConfig(BaseModel):
    """One accelerator: peaks from the datasheet, efficiencies from measurement."""

    model_config = Strict

    name: str
    peak_tflops: PeakTFLOPs
    hbm_GB: PositiveFloat
    hbm_bandwidth_TBps: PositiveFloat
    # Achievable fractions (0..1] of peak, each sourced in `sources`.
    gemm_efficiency: float = Field(0.8, gt=0, le=1)
    gemm_half_dim: float = Field(96.0, ge=0)  # dim at which one GEMM axis halves efficiency
    fp8_gemm_efficiency: float | None = Field(None, gt=0, le=1)
    attention_efficiency: float = Field(0.6, gt=0, le=1)
    memory_bandwidth_efficiency: float = Field(0.85, gt=0, le=1)
    kernel_overhead_us: float = Field(4.0, ge=0)  # launch + tail per kernel
    framework_memory_GB: float = Field(3.0, ge=0)  # CUDA context, allocator, NCCL buffers
    sources: dict[str, str] = {}


class TierConfig(BaseModel):
    """One level of the network: a domain of ``size`` GPUs and its links.

    ``bandwidth_GBps`` is per GPU, per direction, at line rate. ``efficiency``
    is the fraction a ring collective achieves at large messages; the
    small-message curve is ``1 / (1 + (half_bandwidth_MB / S)**curve_exponent)``.
    """

    model_config = Strict

    name: str
    size: PositiveInt
    bandwidth_GBps: PositiveFloat
    latency_us: float = Field(5.0, ge=0)
    efficiency: float = Field(0.8, gt=0, le=1)
    oversubscription: float = Field(1.0, ge=1)
    nvls_busbw_GBps: PositiveFloat | None = None  # NVLink SHARP all-reduce peak busbw
    alltoall_efficiency: float | None = Field(None, gt=0, le=1)
    half_bandwidth_MB: float = Field(16.0, ge=0)
    curve_exponent: float = Field(0.8, gt=0)
    sources: dict[str, str] = {}


class TopologyConfig(BaseModel):
    """A cluster: one GPU type and an ordered list of network tiers, innermost first."""

    model_config = Strict

    name: str
    description: str = ""
    gpu: GPUConfig
    tiers: list[TierConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> TopologyConfig:
        for i in range(1, len(self.tiers)):
            inner, outer = self.tiers[i - 1], self.tiers[i]
            if outer.size % inner.size:
                raise ConfigError(f"tiers[{i}].size", outer.size,
                                  f"must be a multiple of tiers[{i - 1}].size ({inner.size})")
        return self

    @property
    def max_gpus(self) -> int:
        return self.tiers[-1].size
